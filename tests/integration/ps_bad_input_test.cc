// A real `tessera-ps` daemon fed bad input over its Session stream by hand (RawSession):
// every malformed request gets its own error code and a message naming the key and the
// shapes, changes nothing (a valid Pull still returns the value), and leaves the session
// and the daemon serving. A message above the transport's bound ends only its stream: the
// worker reconnects with the same rank. At the end `Command{stop}` stops the daemon cleanly.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/transport.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/raw_session.h"
#include "tests/ndarray/test_util.h"

namespace tessera::integration {
namespace {

using tessera::testing::IsOk;
using tessera::testing::IsOkAndHolds;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Code = absl::StatusCode;

constexpr int kKey = 3;

WorkerMessage PullMessage(int key) {
  WorkerMessage m;
  m.mutable_pull()->set_key(key);
  return m;
}

TEST(PsBadInputTest, EveryBadRequestIsRejectedAndChangesNothing) {
  LocalCluster cluster("bad_input");
  absl::Cleanup print_logs = [&] {
    if (::testing::Test::HasFailure()) std::fprintf(stderr, "%s", cluster.AllLogs().c_str());
  };
  ASSERT_THAT(cluster.StartServers(1, 1), IsOk());
  // Sends up to 64 MiB, so an oversized message reaches the server's own limit.
  auto stub = KVStoreService::NewStub(RawChannel(cluster.servers()[0], 64 << 20));
  std::vector<float> value(20);
  for (int i = 0; i < 20; ++i) value[i] = 0.5f * i;
  const std::string bytes = FloatBytes(value);
  {
    RawSession s(stub.get());
    EXPECT_THAT(s.Call(PullMessage(kKey)), StatusIs(Code::kFailedPrecondition, HasSubstr("Hello")));
    ASSERT_THAT(s.Hello(0, 1, SYNC_MODE_ASYNC), IsOk());
    EXPECT_THAT(s.Hello(0, 1, SYNC_MODE_ASYNC),
                StatusIs(Code::kFailedPrecondition, HasSubstr("Hello sent twice")));

    // Unknown key, and a pull before the key's Init.
    EXPECT_THAT(s.Pull(kKey), StatusIs(Code::kNotFound, HasSubstr("key 3")));
    EXPECT_THAT(s.Push(WholeChunk(99, DT_FLOAT32, {4, 5}, bytes)),
                StatusIs(Code::kNotFound, HasSubstr("key 99")));
    ASSERT_THAT(s.Init(WholeChunk(kKey, DT_FLOAT32, {4, 5}, bytes)), IsOk());
    ASSERT_THAT(s.Pull(kKey), IsOkAndHolds(ElementsAreArray(value)));
    EXPECT_THAT(s.Pull(99), StatusIs(Code::kNotFound, HasSubstr("key 99")));

    const std::string wrong_values = FloatBytes(std::vector<float>(20, -1.0f));
    // Each is INVALID_ARGUMENT, with a message that mentions what is wrong.
    struct Case {
      const char* what;
      WorkerMessage message;
      std::vector<std::string> mentions;
    };
    std::vector<Case> cases;
    auto push = [](ArrayChunk chunk) {
      WorkerMessage m;
      *m.mutable_push() = std::move(chunk);
      return m;
    };
    auto init = [](ArrayChunk chunk) {
      WorkerMessage m;
      *m.mutable_init() = std::move(chunk);
      return m;
    };
    cases.push_back({"push of the wrong size",
                     push(WholeChunk(kKey, DT_FLOAT32, {4, 5}, wrong_values.substr(0, 40))),
                     {"key 3", "float32 (4,5)", "byte 40 of the 80"}});
    cases.push_back({"push of the wrong dtype",
                     push(WholeChunk(kKey, DT_FLOAT64, {4, 5}, wrong_values + wrong_values)),
                     {"key 3", "float64 (4,5)", "float32 (4,5)"}});
    cases.push_back({"push of the wrong shape",
                     push(WholeChunk(kKey, DT_FLOAT32, {5, 4}, wrong_values)),
                     {"key 3", "float32 (5,4)", "float32 (4,5)"}});
    cases.push_back({"second Init with another shape",
                     init(WholeChunk(kKey, DT_FLOAT32, {2, 10}, wrong_values)),
                     {"key 3", "float32 (2,10)", "float32 (4,5)"}});
    cases.push_back({"push with an unknown dtype",
                     push(WholeChunk(kKey, static_cast<DataType>(77), {4, 5}, wrong_values)),
                     {"key 3", "dtype 77"}});
    ArrayChunk late = WholeChunk(kKey, DT_FLOAT32, {4, 5}, wrong_values);
    late.set_offset(8);
    cases.push_back({"first chunk not at offset 0", push(late), {"key 3", "byte 8"}});
    cases.push_back({"request without a body", WorkerMessage(), {"carries no request"}});
    for (Case& c : cases) {
      SCOPED_TRACE(c.what);
      absl::Status status = s.Call(std::move(c.message));
      EXPECT_EQ(status.code(), Code::kInvalidArgument) << status;
      for (const std::string& m : c.mentions) EXPECT_THAT(status.message(), HasSubstr(m));
      EXPECT_THAT(s.Pull(kKey), IsOkAndHolds(ElementsAreArray(value)));
    }

    // A chunk that does not continue its request fails it; the request's later chunks are
    // dropped without a reply (a reply to them would break the next Call).
    {
      WorkerMessage first = push(WholeChunk(kKey, DT_FLOAT32, {4, 5}, wrong_values.substr(0, 40)));
      first.mutable_push()->set_last(false);
      first.set_id(500);
      WorkerMessage gap = first;
      gap.mutable_push()->set_offset(48);
      WorkerMessage rest = first;
      rest.mutable_push()->set_offset(40);
      rest.mutable_push()->set_last(true);
      ASSERT_TRUE(s.Write(first));
      EXPECT_THAT(s.Call(gap),
                  StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("key 3"), HasSubstr("byte 48"),
                                                         HasSubstr("received up to byte 40"))));
      ASSERT_TRUE(s.Write(rest));
      EXPECT_THAT(s.Pull(kKey), IsOkAndHolds(ElementsAreArray(value)));
    }

    // Above kMaxMessageBytes: gRPC ends the stream (the message is never parsed).
    const std::string huge(kvstore::kMaxMessageBytes + 1024, '\0');
    WorkerMessage oversized = push(WholeChunk(kKey, DT_FLOAT32, {4, 5}, huge));
    oversized.set_id(1000);
    s.Write(oversized);
    EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    // The same rank reconnects and finds the value unchanged; a valid push still works.
    RawSession s(stub.get());
    // The server may see the old stream end after this client did: until then rank 0 is
    // still connected (ALREADY_EXISTS), and a reconnecting worker says Hello again.
    absl::Status hello = s.Hello(0, 1, SYNC_MODE_ASYNC);
    for (int i = 0; i < 100 && hello.code() == Code::kAlreadyExists; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      hello = s.Hello(0, 1, SYNC_MODE_ASYNC);
    }
    ASSERT_THAT(hello, IsOk());
    EXPECT_THAT(s.Pull(kKey), IsOkAndHolds(ElementsAreArray(value)));
    std::vector<float> pushed(20, 2.0f);
    ASSERT_THAT(s.Push(WholeChunk(kKey, DT_FLOAT32, {4, 5}, FloatBytes(pushed))), IsOk());
    // dist_async without an optimizer: the push becomes the value.
    EXPECT_THAT(s.Pull(kKey), IsOkAndHolds(ElementsAreArray(pushed)));
    EXPECT_TRUE(s.Finish().ok());
  }
  ASSERT_TRUE(cluster.server(0).running());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  CommandRequest stop;
  stop.set_stop(true);
  CommandReply reply;
  EXPECT_TRUE(stub->Command(&context, stop, &reply).ok());
  absl::StatusOr<ExitStatus> exit = cluster.server(0).Wait(absl::Seconds(10));
  ASSERT_THAT(exit.status(), IsOk());
  EXPECT_TRUE(exit->exited && exit->code == 0) << exit->ToString();
}

}  // namespace
}  // namespace tessera::integration
