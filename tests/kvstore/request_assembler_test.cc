// RequestAssembler on its own: chunks of a request made whole, and each way a worker's chunks
// can fail to add up refused with a message naming it, the refused request forgotten.
#include "kvstore/internal/request_assembler.h"

#include <cstring>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

using ::testing::HasSubstr;
using ::tessera::testing::StatusIs;

constexpr RequestAssembler::Limits kLimits = {
    .server_index = 3, .max_array_bytes = 1 << 20, .max_requests = 2, .max_bytes = 64};

// A chunk of a float32 array of `floats` elements for key 7.
ArrayChunk Chunk(int64_t floats, uint64_t offset, const std::string& data, bool last) {
  ArrayChunk c;
  c.set_key(7);
  c.set_dtype(DT_FLOAT32);
  c.add_shape(floats);
  c.set_offset(offset);
  c.set_data(data);
  c.set_last(last);
  return c;
}

TEST(RequestAssemblerTest, ChunksInOrderMakeTheWholeRequest) {
  RequestAssembler assembler(kLimits);
  ArrayChunk a = Chunk(4, 0, std::string(8, 'a'), false);
  ArrayChunk b = Chunk(4, 8, std::string(8, 'b'), true);
  auto first = assembler.Add(1, a, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());
  EXPECT_EQ(assembler.bytes(), 8u);
  auto whole = assembler.Add(1, b, 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(whole->has_value());
  EXPECT_EQ((*whole)->header.key(), 7);
  EXPECT_TRUE((*whole)->header.data().empty());
  EXPECT_EQ((*whole)->pieces, (std::vector<std::string>{std::string(8, 'a'), std::string(8, 'b')}));
  EXPECT_EQ((*whole)->expected, 16u);
  EXPECT_EQ(assembler.bytes(), 0u);
}

TEST(RequestAssemblerTest, AChunkThatDoesNotContinueItsRequestIsRefusedAndTheRestDropped) {
  RequestAssembler assembler(kLimits);
  ArrayChunk a = Chunk(6, 0, std::string(8, 'a'), false);
  ASSERT_TRUE(assembler.Add(1, a, 0).ok());
  ArrayChunk gap = Chunk(6, 12, std::string(4, 'b'), false);
  EXPECT_THAT(assembler.Add(1, gap, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("at byte 12 does not continue key 7 float32 (6,) received up "
                                 "to byte 8")));
  EXPECT_EQ(assembler.bytes(), 0u);
  // Its later chunks are dropped without a word, up to its last one; then the id is free.
  ArrayChunk rest = Chunk(6, 16, std::string(8, 'c'), true);
  auto dropped = assembler.Add(1, rest, 0);
  ASSERT_TRUE(dropped.ok());
  EXPECT_FALSE(dropped->has_value());
  ArrayChunk again = Chunk(2, 0, std::string(8, 'd'), true);
  auto whole = assembler.Add(1, again, 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->has_value());
}

TEST(RequestAssemblerTest, BadHeadersAreRefusedWithWhatIsWrong) {
  RequestAssembler assembler(kLimits);
  ArrayChunk late = Chunk(4, 4, std::string(4, 'a'), false);
  EXPECT_THAT(assembler.Add(1, late, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("first chunk of request 1 starts at byte 4, not 0")));
  ArrayChunk huge = Chunk(int64_t{1} << 40, 0, "", true);
  EXPECT_THAT(assembler.Add(2, huge, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the server's 1048576-byte array bound")));
  ArrayChunk overrun = Chunk(1, 0, std::string(8, 'a'), true);
  EXPECT_THAT(assembler.Add(3, overrun, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overruns the array")));
  ArrayChunk short_last = Chunk(4, 0, std::string(8, 'a'), true);
  EXPECT_THAT(assembler.Add(4, short_last, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the last chunk ends at byte 8 of the 16")));
  EXPECT_EQ(assembler.bytes(), 0u);
}

TEST(RequestAssemblerTest, TheWorkersBoundsCountOpenRequestsAndBytesHeldElsewhere) {
  RequestAssembler assembler(kLimits);
  ArrayChunk a = Chunk(8, 0, std::string(8, 'a'), false);
  ArrayChunk b = Chunk(8, 0, std::string(8, 'b'), false);
  ASSERT_TRUE(assembler.Add(1, a, 0).ok());
  ASSERT_TRUE(assembler.Add(2, b, 0).ok());
  ArrayChunk c = Chunk(8, 0, std::string(8, 'c'), false);
  EXPECT_THAT(assembler.Add(3, c, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("request number 3 being received at once; server 3 takes at "
                                 "most 2")));
  // 16 bytes open + 8 more + 41 held elsewhere > 64.
  ArrayChunk more = Chunk(8, 8, std::string(8, 'a'), false);
  EXPECT_THAT(assembler.Add(1, more, 41),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("to 65 bytes; server 3 holds at most 64 per worker")));
  EXPECT_EQ(assembler.bytes(), 8u);  // request 1 forgotten, request 2 still open
}

}  // namespace
}  // namespace tessera::kvstore
