// A real `tessera-ps` writes its replies to a worker by the priority of the requests they
// answer: the value of an urgent key (the first layer's, which the next forward pass needs
// first) overtakes the queued chunks of a large one's (ByteScheduler's priority scheduling).
//
// What holds the large reply in the server's queue is flow control, not time: worker 0 sends
// both push_pulls and reads nothing until both rounds are done, so at most its stream's window
// and socket buffers (a few MiB) of the 48 MiB value leave the server before it queues the
// small one's value. Worker 1 completes the rounds, and its reply to each tells the test that
// worker 0's reply is queued (the server answers a round's pulls together).
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "kvstore/transport.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/raw_session.h"

namespace tessera::integration {
namespace {

using tessera::testing::IsOk;

constexpr int kSmall = 0, kLarge = 1;
constexpr int64_t kLargeFloats = int64_t{12} << 20;  // 48 MiB
constexpr uint64_t kChunk = uint64_t{1} << 20;

// `key`'s payload as messages of at most kChunk bytes, all with request id `id`.
std::vector<WorkerMessage> Chunks(uint64_t id, bool init, int key, int64_t floats, float value,
                                  int priority) {
  const std::string bytes = FloatBytes(std::vector<float>(floats, value));
  std::vector<WorkerMessage> messages;
  for (uint64_t offset = 0; offset < bytes.size(); offset += kChunk) {
    WorkerMessage& m = messages.emplace_back();
    m.set_id(id);
    m.set_priority(priority);
    ArrayChunk* chunk = init ? m.mutable_init() : m.mutable_push_pull();
    chunk->set_key(key);
    chunk->set_dtype(DT_FLOAT32);
    chunk->add_shape(floats);
    chunk->set_offset(offset);
    const uint64_t n = std::min<uint64_t>(kChunk, bytes.size() - offset);
    chunk->set_data(bytes.substr(offset, n));
    chunk->set_last(offset + n == bytes.size());
  }
  return messages;
}

absl::Status Send(RawSession& s, const std::vector<WorkerMessage>& messages) {
  for (const WorkerMessage& m : messages) {
    if (!s.Write(m)) return absl::UnavailableError("the stream broke");
  }
  return absl::OkStatus();
}

// Reads until both requests are answered; returns the position among the replies of the small
// key's value and of the large key's last chunk.
struct Order {
  int small = -1;
  int large_last = -1;
};
Order ReadBoth(RawSession& s, uint64_t small_id, uint64_t large_id) {
  Order order;
  ServerMessage reply;
  for (int at = 0; (order.small < 0 || order.large_last < 0) && s.Read(&reply); ++at) {
    EXPECT_EQ(reply.code(), 0) << reply.message();
    if (reply.id() == small_id && kvstore::IsFinalReply(reply)) order.small = at;
    if (reply.id() == large_id && kvstore::IsFinalReply(reply)) order.large_last = at;
  }
  return order;
}

// Worker 0 push_pulls the large key at `large_priority`, then the small one at
// `small_priority`; worker 1 completes both rounds; the order worker 0 reads them in.
Order RunRounds(const std::string& address, int large_priority, int small_priority) {
  auto stub = KVStoreService::NewStub(RawChannel(address, 64 << 20));
  RawSession w0(stub.get()), w1(stub.get());
  EXPECT_THAT(w0.Hello(0, 2, SYNC_MODE_SYNC), IsOk());
  EXPECT_THAT(w1.Hello(1, 2, SYNC_MODE_SYNC), IsOk());
  // Init as the workers do: every worker, the same values.
  for (RawSession* w : {&w0, &w1}) {
    EXPECT_THAT(w->Init(WholeChunk(kSmall, DT_FLOAT32, {4}, FloatBytes({1, 1, 1, 1}))), IsOk());
    std::vector<ServerMessage> ignored;
    for (const WorkerMessage& m : Chunks(9, /*init=*/true, kLarge, kLargeFloats, 1, 0)) {
      if (!m.init().last()) {
        EXPECT_TRUE(w->Write(m));
        continue;
      }
      EXPECT_THAT(w->Call(m, &ignored), IsOk());
    }
  }
  EXPECT_THAT(Send(w0, Chunks(100, false, kLarge, kLargeFloats, 0.5f, large_priority)), IsOk());
  EXPECT_THAT(Send(w0, Chunks(101, false, kSmall, 4, 0.5f, small_priority)), IsOk());
  // Worker 1's rounds, large key first: when its reply is in, worker 0's is queued.
  for (const auto& [id, key, floats] : {std::tuple{200, kLarge, kLargeFloats}, {201, kSmall, 4}}) {
    std::vector<WorkerMessage> chunks = Chunks(id, false, key, floats, 0.25f, 0);
    WorkerMessage last = chunks.back();
    chunks.pop_back();
    EXPECT_THAT(Send(w1, chunks), IsOk());
    EXPECT_THAT(w1.Call(last), IsOk());
  }
  return ReadBoth(w0, 101, 100);
}

TEST(PsPriorityTest, AnUrgentValueOvertakesTheQueuedChunksOfALargeOne) {
  LocalCluster cluster("priority");
  absl::Cleanup print_logs = [&] {
    if (::testing::Test::HasFailure()) std::fprintf(stderr, "%s", cluster.AllLogs().c_str());
  };
  ASSERT_THAT(cluster.StartServers(1, 2), IsOk());
  const int large_chunks = static_cast<int>(kLargeFloats * sizeof(float) / kChunk);

  // The small key at the higher priority (MXNet's -index: key 0 at 0, key 1 at -1): its value
  // comes before most of the large one's chunks.
  const Order urgent = RunRounds(cluster.servers()[0], /*large=*/-1, /*small=*/0);
  ASSERT_GE(urgent.small, 0);
  ASSERT_GE(urgent.large_last, 0);
  EXPECT_LT(urgent.small, large_chunks / 2) << "the small key's value waited behind the large one's";

  // At equal priorities the replies keep the rounds' order: the small value comes last.
  const Order fifo = RunRounds(cluster.servers()[0], 0, 0);
  EXPECT_EQ(fifo.large_last, large_chunks - 1);
  EXPECT_EQ(fifo.small, large_chunks);
}

}  // namespace
}  // namespace tessera::integration
