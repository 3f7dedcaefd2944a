// Complete checkpoints and exact resume through RunJob: a job interrupted at a chosen batch
// and resumed from its newest checkpoint ends with the uninterrupted job's parameters, byte
// for byte, with the local store and in dist_sync with 2 workers on 1 and 2 real parameter
// servers; and every bad checkpoint (cut short, damaged, another job's, another network's,
// outside the run root) is refused naming the file or what differs. Synthetic digits as IDX
// files.
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cancellation.h"
#include "core/file.h"
#include "core/status_matchers.h"
#include "graph/graph_def.h"
#include "graph/symbol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/serialization.h"
#include "server/parameter_server.h"
#include "tests/ndarray/test_util.h"
#include "tests/worker/synthetic_digits.h"
#include "train/checkpoint.h"
#include "worker/job_runner.h"

namespace tessera::worker {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The bytes of every parameter, in name order: what "bit-identical" compares.
std::string ParamBytes(const JobResult& result) {
  std::map<std::string, NDArray> all;
  for (const auto& [name, a] : result.arg_params) all["arg:" + name] = a;
  for (const auto& [name, a] : result.aux_params) all["aux:" + name] = a;
  std::vector<std::string> names;
  std::vector<NDArray> arrays;
  for (const auto& [name, a] : all) {
    names.push_back(name);
    arrays.push_back(a);
  }
  absl::StatusOr<std::string> bytes = EncodeArrays(arrays, names);
  EXPECT_THAT(bytes, IsOk());
  return bytes.ok() ? *bytes : "";
}

class ResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(::testing::TempDir() + "/resume-data");
    fs::create_directories(*data_);
    tessera::testing::WriteDigits(*data_ + "/train-images", *data_ + "/train-labels", 512, 1);
    tessera::testing::WriteDigits(*data_ + "/test-images", *data_ + "/test-labels", 100, 2);
  }
  void SetUp() override {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    run_ = ::testing::TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(run_);
    fs::create_directories(run_);
  }
  const Runtime& rt() const { return owned_->get(); }

  // 3 epochs of 16 batches; a checkpoint after every 5th batch and at each epoch's end, all
  // kept, under RUN/PREFIX-checkpoints.
  JobSpec Job(const std::string& prefix) const {
    JobSpec spec;
    spec.set_version(3);
    spec.set_name("resume-test");
    spec.set_model("mlp");
    DataSpec* data = spec.mutable_data();
    data->set_kind("mnist");
    data->set_train_images(*data_ + "/train-images");
    data->set_train_labels(*data_ + "/train-labels");
    data->set_test_images(*data_ + "/test-images");
    data->set_test_labels(*data_ + "/test-labels");
    data->set_flat(true);
    data->set_shuffle(true);
    spec.set_seed(7);
    spec.set_batch_size(32);
    spec.set_num_epochs(3);
    spec.set_optimizer("sgd");
    (*spec.mutable_optimizer_params())["learning_rate"] = "0.1";
    (*spec.mutable_optimizer_params())["momentum"] = "0.9";
    spec.set_lr_scheduler("factor");
    (*spec.mutable_lr_scheduler_params())["step"] = "7";
    (*spec.mutable_lr_scheduler_params())["factor"] = "0.7";
    spec.set_checkpoint_prefix(run_ + "/" + prefix);
    spec.mutable_checkpoint()->set_every_batches(5);
    spec.mutable_checkpoint()->set_keep(100);
    return spec;
  }
  std::string Checkpoints(const std::string& prefix) const {
    return run_ + "/" + prefix + "-checkpoints";
  }

  // RunJob of `spec`, cancelled once it has done `stop_batch` batches of `stop_epoch`
  // (never: -1).
  absl::StatusOr<JobResult> Run(const JobSpec& spec, int stop_epoch = -1, int stop_batch = -1,
                                const JobEnvironment& environment = {}) {
    Cancellation cancellation;
    JobCallbacks callbacks;
    callbacks.progress = [&](int epoch, int batch) {
      if (epoch == stop_epoch && batch == stop_batch) cancellation.RequestStop();
    };
    return RunJob(rt(), spec, callbacks, &cancellation, environment);
  }

  void DistSyncResumesBitIdentical(int workers, int servers);

  static std::string* data_;
  std::string run_;
  std::unique_ptr<OwnedRuntime> owned_;
};
std::string* ResumeTest::data_ = nullptr;

TEST_F(ResumeTest, AnInterruptedJobResumedFromItsNewestCheckpointEndsBitIdentical) {
  absl::StatusOr<JobResult> whole = Run(Job("whole"));
  ASSERT_THAT(whole, IsOk());
  EXPECT_GT(whole->eval.at("accuracy"), 0.9);
  // Every 5th batch and every epoch's end: 3 within each epoch of 16, then (e + 1, 0).
  EXPECT_EQ(std::distance(fs::directory_iterator(Checkpoints("whole")), fs::directory_iterator()), 12);

  // Stopped mid-epoch (batch 12 of epoch 1): the newest checkpoint is (1, 10).
  const JobSpec cut = Job("cut");
  EXPECT_THAT(Run(cut, /*stop_epoch=*/1, /*stop_batch=*/12), StatusIs(absl::StatusCode::kCancelled));
  absl::StatusOr<std::string> newest = train::NewestCheckpoint(Checkpoints("cut"));
  ASSERT_THAT(newest, IsOk());
  EXPECT_EQ(fs::path(*newest).filename(), train::CheckpointName(1, 10));
  // A write a crash cut short (no manifest) is newer, and passed over.
  fs::copy(*newest, Checkpoints("cut") + "/" + train::CheckpointName(1, 15));
  fs::remove(Checkpoints("cut") + "/" + train::CheckpointName(1, 15) + "/MANIFEST");

  JobSpec resumed = cut;
  resumed.set_resume("latest");
  std::vector<JobEvent> events;
  absl::StatusOr<JobResult> rest =
      RunJob(rt(), resumed, [&](const JobEvent& e) { events.push_back(e); });
  ASSERT_THAT(rest, IsOk());
  EXPECT_EQ(ParamBytes(*rest), ParamBytes(*whole));
  EXPECT_EQ(rest->eval, whole->eval);
  // Every epoch reported once: epoch 0 from the checkpoint's history, then 1 and 2.
  std::vector<int> epochs;
  for (const JobEvent& e : events) {
    if (e.has_epoch()) epochs.push_back(e.epoch().epoch());
  }
  EXPECT_EQ(epochs, std::vector<int>({0, 1, 2}));

  // A fresh run of the job moves the earlier run's checkpoints aside: stopped before its
  // own first one, its recovery ("auto") starts over instead of taking the earlier run's.
  EXPECT_THAT(Run(Job("whole"), 0, 3), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(train::NewestCheckpoint(Checkpoints("whole")), StatusIs(absl::StatusCode::kNotFound));
  JobSpec recovered = Job("whole");
  recovered.set_resume("auto");
  absl::StatusOr<JobResult> again = Run(recovered);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(ParamBytes(*again), ParamBytes(*whole));
  EXPECT_EQ(std::distance(fs::directory_iterator(Checkpoints("whole") + ".previous"),
                          fs::directory_iterator()),
            12);

  // At an epoch's start, and from an explicit folder of another run of the same job.
  JobSpec from_epoch = Job("from-epoch");
  from_epoch.set_resume(Checkpoints("whole") + "/" + train::CheckpointName(2, 0));
  absl::StatusOr<JobResult> last_epoch = Run(from_epoch);
  ASSERT_THAT(last_epoch, IsOk());
  EXPECT_EQ(ParamBytes(*last_epoch), ParamBytes(*whole));
}

// A network that draws random numbers (Dropout): the resumed run draws what the
// uninterrupted one drew, as the generators are reseeded per batch.
TEST_F(ResumeTest, ANetworkWithDropoutResumesBitIdentical) {
  using graph::Symbol;
  absl::StatusOr<Symbol> fc1 = Symbol::Create("FullyConnected", {{"num_hidden", "64"}},
                                              {Symbol::Variable("data")}, "fc1");
  ASSERT_THAT(fc1.status(), IsOk());
  absl::StatusOr<Symbol> relu = Symbol::Create("Activation", {{"act_type", "relu"}}, {*fc1}, "relu1");
  ASSERT_THAT(relu.status(), IsOk());
  absl::StatusOr<Symbol> drop = Symbol::Create("Dropout", {{"p", "0.3"}}, {*relu}, "drop1");
  ASSERT_THAT(drop.status(), IsOk());
  absl::StatusOr<Symbol> fc2 = Symbol::Create("FullyConnected", {{"num_hidden", "10"}}, {*drop}, "fc2");
  ASSERT_THAT(fc2.status(), IsOk());
  absl::StatusOr<Symbol> net = Symbol::Create("SoftmaxOutput", {}, {*fc2, Symbol::Variable("softmax_label")}, "softmax");
  ASSERT_THAT(net.status(), IsOk());
  auto job = [&](const std::string& prefix) {
    JobSpec spec = Job(prefix);
    *spec.mutable_graph() = graph::ToGraphDef(*net);
    return spec;
  };
  absl::StatusOr<JobResult> whole = Run(job("whole"));
  ASSERT_THAT(whole, IsOk());
  EXPECT_THAT(Run(job("cut"), 1, 8), StatusIs(absl::StatusCode::kCancelled));
  JobSpec resumed = job("cut");
  resumed.set_resume("latest");
  absl::StatusOr<JobResult> rest = Run(resumed);
  ASSERT_THAT(rest, IsOk());
  EXPECT_EQ(ParamBytes(*rest), ParamBytes(*whole));
}

// dist_sync with `workers` workers on `servers` real parameter servers. Each worker has a
// run folder of its own (as pods with their own volumes): only rank 0's holds checkpoints,
// and the others resume at rank 0's position without seeing them. Each has a runtime of its
// own too, as processes have: ranks sharing one random generator would draw their
// initializations interleaved, and the first worker's (the one the servers keep) would
// change from run to run.
void ResumeTest::DistSyncResumesBitIdentical(int workers, int servers) {
  kvstore::ServerStoreOptions options;
  options.num_workers = workers;
  options.num_servers = servers;
  std::vector<std::unique_ptr<server::ParameterServer>> ps;
  for (int s = 0; s < servers; ++s) {
    options.server_index = s;
    auto started = server::ParameterServer::Start("127.0.0.1:0", options);
    ASSERT_THAT(started, IsOk());
    ps.push_back(*std::move(started));
  }
  // Every rank of one run, on threads; rank 0 is cancelled at (stop_epoch, stop_batch) and
  // takes the others with it. Rank 0's results.
  auto run_all = [&](const std::string& prefix, const std::string& job_id,
                      const std::string& resume, int stop_epoch,
                      int stop_batch) -> absl::StatusOr<JobResult> {
    Cancellation cancellation;
    // Made before the results, so they outlive them: the results' arrays are theirs. Rank 0
    // runs on the fixture's.
    std::vector<std::unique_ptr<OwnedRuntime>> runtimes(workers);
    for (int rank = 1; rank < workers; ++rank) {
      runtimes[rank] = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    }
    std::vector<absl::StatusOr<JobResult>> results(workers, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < workers; ++rank) {
      threads.emplace_back([&, rank] {
        JobSpec spec = Job(prefix);
        if (rank != 0) spec.set_checkpoint_prefix(absl::StrCat(run_, "/rank", rank, "/", prefix));
        spec.set_job_id(job_id);
        spec.set_kvstore("dist_sync");
        for (const auto& server : ps) spec.add_ps_hosts(server->address());
        spec.set_rank(rank);
        spec.set_num_workers(workers);
        spec.mutable_data()->set_part_index(rank);
        spec.mutable_data()->set_num_parts(workers);
        spec.set_batch_size(16);
        spec.set_resume(resume);
        JobCallbacks callbacks;
        if (rank == 0) {
          callbacks.progress = [&](int epoch, int batch) {
            if (epoch == stop_epoch && batch == stop_batch) cancellation.Cancel();
          };
        }
        const Runtime& runtime = rank == 0 ? rt() : runtimes[rank]->get();
        results[rank] = RunJob(runtime, spec, callbacks, &cancellation);
      });
    }
    for (auto& t : threads) t.join();
    for (int rank = 1; rank < workers; ++rank) {
      if (results[0].ok() && results[rank].ok()) {
        EXPECT_EQ(ParamBytes(*results[0]), ParamBytes(*results[rank])) << "rank " << rank;
      }
    }
    return results[0];
  };
  absl::StatusOr<JobResult> whole = run_all("whole", "whole", "", -1, -1);
  ASSERT_THAT(whole, IsOk());
  EXPECT_GT(whole->eval.at("accuracy"), 0.9);
  // Whatever order the pushes of a round reach the servers in, the same bytes.
  absl::StatusOr<JobResult> again = run_all("again", "again", "", -1, -1);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(ParamBytes(*again), ParamBytes(*whole));
  EXPECT_THAT(run_all("cut", "cut", "", 1, 7), StatusIs(absl::StatusCode::kCancelled));
  absl::StatusOr<std::string> newest = train::NewestCheckpoint(Checkpoints("cut"));
  ASSERT_THAT(newest, IsOk());
  EXPECT_EQ(fs::path(*newest).filename(), train::CheckpointName(1, 5));
  for (int rank = 1; rank < workers; ++rank) {
    EXPECT_FALSE(fs::exists(absl::StrCat(run_, "/rank", rank, "/cut-checkpoints")));
  }
  // As a recovery reruns it: "auto", the newest checkpoint where rank 0 finds one.
  absl::StatusOr<JobResult> rest = run_all("cut", "cut-resumed", "auto", -1, -1);
  ASSERT_THAT(rest, IsOk());
  EXPECT_EQ(ParamBytes(*rest), ParamBytes(*whole));
}

TEST_F(ResumeTest, ADistSyncJobOfTwoWorkersResumesBitIdentical) {
  DistSyncResumesBitIdentical(/*workers=*/2, /*servers=*/1);
}

TEST_F(ResumeTest, ADistSyncJobOnTwoServersResumesBitIdentical) {
  DistSyncResumesBitIdentical(/*workers=*/2, /*servers=*/2);
}

// Four workers: the servers sum each round's pushes in rank order, so two runs write the
// same bytes and a resumed run ends with the uninterrupted one's.
TEST_F(ResumeTest, ADistSyncJobOfFourWorkersIsReproducibleAndResumesBitIdentical) {
  DistSyncResumesBitIdentical(/*workers=*/4, /*servers=*/2);
}

TEST_F(ResumeTest, BadCheckpointsAreRefusedNamingTheFileOrWhatDiffers) {
  ASSERT_THAT(Run(Job("good"), 0, 5), StatusIs(absl::StatusCode::kCancelled));
  const std::string good = Checkpoints("good") + "/" + train::CheckpointName(0, 5);
  auto copy = [&](const std::string& name) {
    const std::string to = run_ + "/" + name;
    fs::copy(good, to);
    return to;
  };
  auto resume = [&](const std::string& path, JobSpec spec) {
    spec.set_resume(path);
    return Run(spec, -1, -1, {.run_root = run_});
  };
  const JobSpec job = Job("again");

  // A truncated parameter file, and one with a byte changed.
  const std::string truncated = copy("truncated");
  fs::resize_file(truncated + "/params", fs::file_size(truncated + "/params") - 7);
  EXPECT_THAT(resume(truncated, job),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("resume"), HasSubstr("truncated/params"))));
  const std::string tampered = copy("tampered");
  {
    std::fstream file(tampered + "/params", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put('\x7f');
  }
  EXPECT_THAT(resume(tampered, job), StatusIs(absl::StatusCode::kDataLoss,
                                              AllOf(HasSubstr("tampered/params"),
                                                    HasSubstr("SHA-256"))));
  // A damaged manifest, and none.
  const std::string bad_manifest = copy("bad-manifest");
  {
    std::fstream file(bad_manifest + "/MANIFEST", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('\x01');
  }
  EXPECT_THAT(resume(bad_manifest, job),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad-manifest/MANIFEST")));
  const std::string cut_short = copy("cut-short");
  fs::remove(cut_short + "/MANIFEST");
  EXPECT_THAT(resume(cut_short, job),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not a complete checkpoint")));
  // Another job, another network, another number of workers.
  JobSpec renamed = job;
  renamed.set_name("another-job");
  EXPECT_THAT(resume(good, renamed),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("of job 'resume-test', not of 'another-job'"))));
  JobSpec lenet = job;
  lenet.set_model("lenet");
  lenet.mutable_data()->set_flat(false);
  EXPECT_THAT(resume(good, lenet),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("resume"), HasSubstr("another network"))));
  // Outside the run root, and 'latest' without any checkpoint.
  EXPECT_THAT(resume("/tmp", job), StatusIs(absl::StatusCode::kPermissionDenied,
                                            AllOf(HasSubstr("resume"), HasSubstr("run root"))));
  EXPECT_THAT(resume("latest", Job("never-ran")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no complete checkpoint")));
  // Nothing was overwritten: the good checkpoint still resumes.
  absl::StatusOr<JobResult> resumed = resume(good, job);
  EXPECT_THAT(resumed, IsOk());
}

}  // namespace
}  // namespace tessera::worker
