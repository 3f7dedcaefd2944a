#include "core/context.h"

#include "absl/container/flat_hash_set.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ContextTest, ParsesEveryWrittenForm) {
  EXPECT_EQ(*Context::Parse("cpu"), Context::CPU());
  EXPECT_EQ(*Context::Parse("gpu:3"), Context::GPU(3));
  EXPECT_EQ(*Context::Parse(" gpu(1) "), Context::GPU(1));
  EXPECT_EQ(*Context::Parse("cpu_pinned(0)"), Context::CPUPinned(0));
}

TEST(ContextTest, ToStringRoundTrips) {
  for (Context c : {Context::CPU(), Context::GPU(2), Context::CPUPinned(1)}) {
    EXPECT_EQ(*Context::Parse(c.ToString()), c) << c.ToString();
  }
}

TEST(ContextTest, RejectsBadTextNamingIt) {
  EXPECT_THAT(Context::Parse("tpu:0"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("'tpu:0'")));
  EXPECT_THAT(Context::Parse("gpu:-1"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("'-1'")));
  EXPECT_THAT(Context::Parse("gpu(1"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("device id")));
}

TEST(ContextTest, HashesByTypeAndId) {
  absl::flat_hash_set<Context> set = {Context::CPU(0), Context::GPU(0), Context::GPU(0)};
  EXPECT_EQ(set.size(), 2u);
}

}  // namespace
}  // namespace tessera
