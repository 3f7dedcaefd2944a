// The worker side of a job: RunJob (a whole job in-process), JobManager (one job at a
// time, cancel, parameters) and the gRPC Worker service on a loopback port, on a small
// synthetic digit set written as real IDX files (each class lights its own band of rows,
// so a few epochs learn it). The full MNIST runs are in tests/train and tests/integration.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/worker/synthetic_digits.h"
#include "server/parameter_server.h"
#include "tests/ndarray/test_util.h"
#include "worker/job_manager.h"
#include "worker/job_runner.h"
#include "worker/worker_service.h"

namespace tessera::worker {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using tessera::testing::WriteDigits;

class WorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir());
    WriteDigits(*dir_ + "/train-images", *dir_ + "/train-labels", 512, 1);
    WriteDigits(*dir_ + "/test-images", *dir_ + "/test-labels", 200, 2);
  }
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }

  static JobSpec MlpJob() {
    JobSpec spec;
    spec.set_version(1);
    spec.set_name("mlp-test");
    spec.set_model("mlp");
    DataSpec* data = spec.mutable_data();
    data->set_kind("mnist");
    data->set_train_images(*dir_ + "/train-images");
    data->set_train_labels(*dir_ + "/train-labels");
    data->set_test_images(*dir_ + "/test-images");
    data->set_test_labels(*dir_ + "/test-labels");
    data->set_flat(true);
    spec.set_batch_size(32);
    spec.set_num_epochs(3);
    spec.set_optimizer("sgd");
    (*spec.mutable_optimizer_params())["learning_rate"] = "0.1";
    (*spec.mutable_optimizer_params())["momentum"] = "0.9";
    spec.set_batch_event_every(4);
    return spec;
  }
  const Runtime& rt() const { return owned_->get(); }

  static std::string* dir_;
  std::unique_ptr<OwnedRuntime> owned_;
};
std::string* WorkerTest::dir_ = nullptr;

TEST_F(WorkerTest, AJobTrainsAndReportsStartedBatchesEpochsAndFinished) {
  std::vector<JobEvent> events;
  auto result = RunJob(rt(), MlpJob(), [&](const JobEvent& e) { events.push_back(e); });
  ASSERT_THAT(result, IsOk());
  EXPECT_GT(result->eval.at("accuracy"), 0.9);
  EXPECT_TRUE(result->arg_params.count("fc1_weight"));
  ASSERT_GE(events.size(), 5u);
  EXPECT_TRUE(events.front().has_started());
  EXPECT_TRUE(events.back().has_finished());
  EXPECT_EQ(events.back().finished().eval().at("accuracy"), result->eval.at("accuracy"));
  int epochs = 0, batches = 0;
  for (const JobEvent& e : events) {
    if (e.has_epoch()) {
      EXPECT_EQ(e.epoch().epoch(), epochs++);
      EXPECT_GT(e.epoch().samples_per_second(), 0);
      EXPECT_TRUE(e.epoch().eval().count("accuracy"));
    }
    if (e.has_batch()) {
      ++batches;
      EXPECT_EQ(e.batch().batch() % 4, 0);
    }
  }
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(batches, 3 * (512 / 32 / 4));
}

TEST_F(WorkerTest, BadJobsNameTheFieldNodeOrFile) {
  auto run = [&](const JobSpec& spec) { return RunJob(rt(), spec, [](const JobEvent&) {}).status(); };
  JobSpec spec = MlpJob();
  spec.set_symbol_json(R"({"nodes":[{"op":"null","name":"data","inputs":[]},
      {"op":"Frobnicate","name":"f1","inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]})");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("network"), HasSubstr("Frobnicate"))));
  spec.set_symbol_json(R"({"nodes":[{"op":"null","name":"data","inputs":[]},
      {"op":"Activation","name":"relu1","attrs":{"act_type":"relu"},"inputs":[[5,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]})");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("network"), HasSubstr("relu1"))));
  spec = MlpJob();
  spec.set_model("lenet");  // LeNet on flat (batch, 784) rows: shapes do not fit
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("network")));
  spec = MlpJob();
  spec.mutable_data()->set_train_images(*dir_ + "/missing-images");
  const absl::Status missing = run(spec);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("missing-images"));
  spec = MlpJob();
  spec.set_optimizer("sgdd");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sgdd")));
  spec = MlpJob();
  spec.set_kvstore("dist_sync");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ps_hosts")));
  spec.set_kvstore("nccl");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nccl")));
  spec = MlpJob();
  spec.set_batch_size(0);
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size")));
  spec = MlpJob();
  spec.set_model("resnet");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("network.model")));
}

TEST_F(WorkerTest, TwoWorkersTrainOnePartitionEachThroughTheParameterServer) {
  kvstore::ServerStoreOptions options;
  options.num_workers = 2;
  auto ps = server::ParameterServer::Start("127.0.0.1:0", options);
  ASSERT_THAT(ps, IsOk());
  // A runtime per worker, as separate processes have (declared first: the results' arrays
  // live in them). Two dist_sync workers sharing one engine hung about one run in six.
  std::vector<std::unique_ptr<OwnedRuntime>> runtimes;
  for (int rank = 0; rank < 2; ++rank) {
    runtimes.push_back(tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded));
  }
  std::vector<absl::StatusOr<JobResult>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (int rank = 0; rank < 2; ++rank) {
    workers.emplace_back([&, rank] {
      JobSpec spec = MlpJob();
      spec.set_kvstore("dist_sync");
      spec.add_ps_hosts((*ps)->address());
      spec.set_rank(rank);
      spec.set_num_workers(2);
      spec.mutable_data()->set_part_index(rank);
      spec.mutable_data()->set_num_parts(2);
      spec.set_batch_size(16);
      results[rank] = RunJob(runtimes[rank]->get(), spec, [](const JobEvent&) {});
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_THAT(results[0], IsOk());
  ASSERT_THAT(results[1], IsOk());
  EXPECT_GT(results[0]->eval.at("accuracy"), 0.9);
  // dist_sync: both end with the servers' weights.
  EXPECT_EQ(*results[0]->arg_params.at("fc2_weight").AsVector<float>(),
            *results[1]->arg_params.at("fc2_weight").AsVector<float>());
}

TEST_F(WorkerTest, TheManagerRunsOneJobAtATimeAndCancels) {
  std::atomic<int> batches{0};
  std::promise<absl::Status> done, second;  // before `jobs`: its thread may still use them
  JobManager jobs(rt());
  EXPECT_THAT(jobs.Params(), StatusIs(absl::StatusCode::kFailedPrecondition));
  JobSpec spec = MlpJob();
  spec.set_num_epochs(1000);
  spec.set_batch_event_every(1);
  ASSERT_THAT(jobs.Start(spec, [&](const JobEvent& e) { batches += e.has_batch(); },
                         [&](absl::Status s) { done.set_value(s); }),
              IsOk());
  EXPECT_THAT(jobs.Start(spec, [](const JobEvent&) {}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("mlp-test")));
  for (int i = 0; i < 6000 && batches < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(batches.load(), 3);
  EXPECT_EQ(jobs.Status().state(), WorkerStatus::RUNNING);
  EXPECT_TRUE(jobs.Cancel());
  EXPECT_THAT(done.get_future().get(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(jobs.Status().state(), WorkerStatus::IDLE);
  EXPECT_FALSE(jobs.Cancel());
  // The next job runs to the end, and its parameters can be fetched.
  ASSERT_THAT(jobs.Start(MlpJob(), [](const JobEvent&) {}, [&](absl::Status s) { second.set_value(s); }), IsOk());
  EXPECT_THAT(second.get_future().get(), IsOk());
  auto params = jobs.Params();
  ASSERT_THAT(params, IsOk());
  EXPECT_EQ(params->arg_params().at("fc1_weight").shape_size(), 2);
}

TEST_F(WorkerTest, TheGrpcServiceStreamsEventsAndStatusesOnLoopback) {
  JobManager jobs(rt());
  WorkerServiceImpl service(&jobs);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                  grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    auto reader = stub->RunJob(&context, MlpJob());
    JobEvent event;
    int n = 0;
    bool finished = false;
    while (reader->Read(&event)) {
      ++n;
      finished = event.has_finished();
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(finished);
    EXPECT_GE(n, 5);
  }
  {
    JobSpec bad = MlpJob();
    bad.set_optimizer("sgdd");
    grpc::ClientContext context;
    auto reader = stub->RunJob(&context, bad);
    JobEvent event;
    while (reader->Read(&event)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("sgdd"));
  }
  {
    grpc::ClientContext context;
    WorkerStatus status;
    ASSERT_TRUE(stub->GetStatus(&context, GetStatusRequest(), &status).ok());
    EXPECT_EQ(status.state(), WorkerStatus::IDLE);
    EXPECT_THAT(status.last_result(), HasSubstr("sgdd"));
  }
  {
    grpc::ClientContext context;
    GetParamsReply params;
    ASSERT_TRUE(stub->GetParams(&context, GetParamsRequest(), &params).ok());
    EXPECT_TRUE(params.arg_params().count("fc3_weight"));
  }
  server->Shutdown();
}

}  // namespace
}  // namespace tessera::worker
