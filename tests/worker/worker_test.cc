// The worker side of a job: RunJob (a whole job in-process), JobManager (one job at a
// time, cancel, parameters) and the gRPC Worker service on a loopback port, on a small
// synthetic digit set written as real IDX files, CSV files and a RecordIO pack of PNGs
// (each class lights its own band of rows, so a few epochs learn it). The full MNIST runs
// are in tests/train and tests/integration.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/metrics.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "io/image_codec.h"
#include "io/image_record.h"
#include "io/recordio.h"
#include "ndarray/params_file.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "server/parameter_server.h"
#include "tests/ndarray/test_util.h"
#include "tests/worker/synthetic_digits.h"
#include "worker/job_manager.h"
#include "worker/job_runner.h"
#include "worker/worker_service.h"

namespace tessera::worker {
namespace {

using tessera::testing::Digits;
using tessera::testing::IsOk;
using tessera::testing::IsOkAndHolds;
using tessera::testing::kDigitPixels;
using tessera::testing::kDigitSide;
using tessera::testing::MakeDigits;
using tessera::testing::StatusIs;
using tessera::testing::WriteDigits;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The digits as a RecordIO pack of 28x28 gray PNG image records (id = position, one label),
// as im2rec packs them, with its .idx when `index` is not empty.
void WriteDigitRecords(const Digits& d, const std::string& rec, const std::string& index) {
  auto writer = io::RecordIOWriter::Open(rec);
  ASSERT_THAT(writer, IsOk());
  std::vector<io::RecordIndexEntry> entries;
  for (size_t i = 0; i < d.labels.size(); ++i) {
    io::Image image{.height = kDigitSide, .width = kDigitSide, .channels = 1};
    image.pixels.assign(d.pixels.begin() + i * kDigitPixels,
                        d.pixels.begin() + (i + 1) * kDigitPixels);
    absl::StatusOr<std::string> png = io::EncodePng(image);
    ASSERT_THAT(png, IsOk());
    auto offset =
        (*writer)->Write(io::PackImageRecord({static_cast<float>(d.labels[i])}, i, 0, *png));
    ASSERT_THAT(offset, IsOk());
    entries.push_back({.key = i, .offset = *offset});
  }
  ASSERT_THAT((*writer)->Close(), IsOk());
  if (!index.empty()) {
    ASSERT_THAT(io::WriteRecordIndex(index, entries), IsOk());
  }
}

// The digits as CSVIter reads them: a line of 784 values in [0, 1] per image, and a label
// file of one value per line.
void WriteDigitCsv(const Digits& d, const std::string& data, const std::string& labels) {
  std::ofstream out(data), lab(labels);
  for (size_t i = 0; i < d.labels.size(); ++i) {
    for (int p = 0; p < kDigitPixels; ++p) {
      if (p > 0) out << ',';
      out << d.pixels[i * kDigitPixels + p] / 255.0f;
    }
    out << '\n';
    lab << static_cast<int>(d.labels[i]) << '\n';
  }
  ASSERT_TRUE(out.good() && lab.good());
}

class WorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir());
    WriteDigits(*dir_ + "/train-images", *dir_ + "/train-labels", 512, 1);
    WriteDigits(*dir_ + "/test-images", *dir_ + "/test-labels", 200, 2);
    // The same images and labels again, as the other kinds read them.
    const Digits train = MakeDigits(512, 1), test = MakeDigits(200, 2);
    WriteDigitRecords(train, *dir_ + "/train.rec", *dir_ + "/train.idx");
    WriteDigitRecords(test, *dir_ + "/test.rec", "");
    WriteDigitCsv(train, *dir_ + "/train-data.csv", *dir_ + "/train-label.csv");
    WriteDigitCsv(test, *dir_ + "/test-data.csv", *dir_ + "/test-label.csv");
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
  // MlpJob on the RecordIO pack: (B, 1, 28, 28) images, which the MLP's first
  // FullyConnected flattens, scaled to [0, 1] as the IDX iterator does.
  static JobSpec RecordJob() {
    JobSpec spec = MlpJob();
    spec.set_name("mlp-rec-test");
    DataSpec* data = spec.mutable_data();
    data->Clear();
    data->set_kind("imagerecord");
    data->set_shuffle(true);
    auto& train = *data->mutable_train_iter();
    train["path_imgrec"] = *dir_ + "/train.rec";
    train["path_imgidx"] = *dir_ + "/train.idx";
    train["data_shape"] = "(1,28,28)";
    train["scale"] = "0.00392156862745098";
    train["preprocess_threads"] = "2";
    auto& test = *data->mutable_test_iter();
    test["path_imgrec"] = *dir_ + "/test.rec";  // no index: records found by scanning
    test["data_shape"] = "(1,28,28)";
    test["scale"] = "0.00392156862745098";
    return spec;
  }
  // MlpJob on the CSV files: (B, 784) rows.
  static JobSpec CsvJob() {
    JobSpec spec = MlpJob();
    spec.set_name("mlp-csv-test");
    DataSpec* data = spec.mutable_data();
    data->Clear();
    data->set_kind("csv");
    data->set_shuffle(true);
    auto& train = *data->mutable_train_iter();
    train["data_csv"] = *dir_ + "/train-data.csv";
    train["label_csv"] = *dir_ + "/train-label.csv";
    train["data_shape"] = "(784)";
    auto& test = *data->mutable_test_iter();
    test["data_csv"] = *dir_ + "/test-data.csv";
    test["label_csv"] = *dir_ + "/test-label.csv";
    test["data_shape"] = "(784,)";
    return spec;
  }
  const Runtime& rt() const { return owned_->get(); }

  static std::string* dir_;
  std::unique_ptr<OwnedRuntime> owned_;
};
std::string* WorkerTest::dir_ = nullptr;

// A cosine schedule that reaches 0 at the first update: the weights never move, so the
// job ends no better than its initialization (the same job at a fixed rate: > 90%).
// A daemon's roots: its flags, else TESSERA_DATA_ROOT / TESSERA_RUN_ROOT, else the working
// directory; a root that is not a folder is refused naming the flag.
TEST(DaemonJobEnvironmentTest, FlagsThenVariablesThenTheWorkingDirectory) {
  const std::string here = std::filesystem::current_path().string();
  const std::string tmp = ::testing::TempDir();
  ASSERT_EQ(unsetenv("TESSERA_DATA_ROOT"), 0);
  ASSERT_EQ(setenv("TESSERA_RUN_ROOT", tmp.c_str(), 1), 0);
  absl::StatusOr<JobEnvironment> env = DaemonJobEnvironment({.token = "t"}, "", "");
  ASSERT_THAT(env, IsOk());
  EXPECT_EQ(env->data_root, here);
  EXPECT_EQ(env->run_root, tmp);
  EXPECT_EQ(env->security.token, "t");
  env = DaemonJobEnvironment({}, tmp, here);
  ASSERT_THAT(env, IsOk());
  EXPECT_EQ(env->data_root, tmp);
  EXPECT_EQ(env->run_root, here);
  const std::string file = tmp + "/not-a-folder";
  { std::ofstream(file) << "x"; }
  EXPECT_THAT(DaemonJobEnvironment({}, file, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--data_root"), HasSubstr(file))));
  ASSERT_EQ(setenv("TESSERA_RUN_ROOT", file.c_str(), 1), 0);
  EXPECT_THAT(DaemonJobEnvironment({}, "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--run_root"), HasSubstr("TESSERA_RUN_ROOT"))));
  ASSERT_EQ(unsetenv("TESSERA_RUN_ROOT"), 0);
}

TEST_F(WorkerTest, TheJobsLearningRateScheduleDrivesTheOptimizer) {
  JobSpec spec = MlpJob();
  spec.set_lr_scheduler("cosine");
  (*spec.mutable_lr_scheduler_params())["max_update"] = "1";
  auto frozen = RunJob(rt(), spec, [](const JobEvent&) {});
  ASSERT_THAT(frozen, IsOk());
  EXPECT_LT(frozen->eval.at("accuracy"), 0.5);

  (*spec.mutable_lr_scheduler_params())["max_update"] = "40";  // of 48 updates
  auto decayed = RunJob(rt(), spec, [](const JobEvent&) {});
  ASSERT_THAT(decayed, IsOk());
  EXPECT_GT(decayed->eval.at("accuracy"), 0.9);

  spec.set_lr_scheduler("warp");
  EXPECT_THAT(RunJob(rt(), spec, [](const JobEvent&) {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warp")));
}

TEST_F(WorkerTest, AJobTrainsAndReportsStartedBatchesEpochsAndFinished) {
  std::vector<JobEvent> events;
  auto result = RunJob(rt(), MlpJob(), [&](const JobEvent& e) { events.push_back(e); });
  ASSERT_THAT(result, IsOk());
  EXPECT_GT(result->eval.at("accuracy"), 0.9);
  EXPECT_TRUE(result->arg_params.count("fc1_weight"));
  ASSERT_GE(events.size(), 5u);
  ASSERT_TRUE(events.front().has_started());
  EXPECT_EQ(events.front().started().batches_per_epoch(), 512 / 32);
  // 784-128-64-10: weights and biases.
  EXPECT_EQ(events.front().started().parameters(), 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);
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
  // Counts are checked before anything is allocated from them (2^31 placeholder workers
  // would take 64 GiB).
  spec = MlpJob();
  spec.set_kvstore("dist_sync");
  spec.add_ps_hosts("127.0.0.1:1");
  spec.set_num_workers(2147483647);
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("num_workers"), HasSubstr("2147483647"))));
  spec.set_num_workers(2);
  spec.set_rank(2);
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  spec.set_rank(-1);
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  spec = MlpJob();
  spec.set_model("resnet");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("network.model")));
}

// Fine-tuning as a job: the first run checkpoints in MXNet's format, the second starts from
// that file with its first layer fixed, as Module.set_params / fixed_param_names do.
TEST_F(WorkerTest, AJobStartsFromAnMxnetCheckpointWithFixedParameters) {
  const auto run = [&](const JobSpec& spec, const JobEnvironment& environment = {}) {
    return RunJob(
        rt(), spec, [](const JobEvent&) {}, nullptr, environment);
  };
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/finetune";
  std::filesystem::create_directories(dir);
  JobSpec first = MlpJob();
  first.set_num_epochs(1);
  first.set_checkpoint_prefix(dir + "/mlp");
  first.set_checkpoint_format("mxnet");
  auto trained = run(first);
  ASSERT_THAT(trained, IsOk());
  const std::string checkpoint = dir + "/mlp-0001.params";
  auto bytes = ReadFileToString(checkpoint);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(bytes->substr(0, 8), std::string("\x12\x01\0\0\0\0\0\0", 8)) << "MXNet's magic";

  JobSpec tune = MlpJob();
  tune.set_version(2);
  tune.set_num_epochs(1);
  tune.mutable_initial_params()->set_path(checkpoint);
  tune.add_fixed_param_names("fc1_weight");
  auto tuned = run(tune);
  ASSERT_THAT(tuned, IsOk());
  EXPECT_EQ(*tuned->arg_params.at("fc1_weight").AsVector<float>(),
            *trained->arg_params.at("fc1_weight").AsVector<float>());
  EXPECT_NE(*tuned->arg_params.at("fc2_weight").AsVector<float>(),
            *trained->arg_params.at("fc2_weight").AsVector<float>());
  EXPECT_GT(tuned->eval.at("accuracy"), trained->eval.at("accuracy") - 0.02);

  // A file lacking a parameter: an error naming it, unless allow_missing.
  const std::string partial = dir + "/partial.params";
  ASSERT_THAT(SaveParamsFile(partial, {{"arg:fc1_weight", trained->arg_params.at("fc1_weight")}},
                             ParamsFormat::kMxnet),
              IsOk());
  JobSpec missing = tune;
  missing.mutable_initial_params()->set_path(partial);
  EXPECT_THAT(run(missing), StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("initial_params"), HasSubstr("fc2_weight"))));
  missing.mutable_initial_params()->set_allow_missing(true);
  EXPECT_THAT(run(missing), IsOk());

  JobSpec bad = tune;
  bad.set_fixed_param_names(0, "fc1_wieght");
  EXPECT_THAT(run(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fc1_wieght")));
  bad = tune;
  bad.mutable_initial_params()->set_path(dir + "/none.params");
  EXPECT_THAT(run(bad), StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.params")));
  bad = tune;
  bad.set_checkpoint_format("onnx");
  EXPECT_THAT(run(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_format")));
  // Outside the worker's data root: refused by name.
  JobEnvironment confined;
  confined.data_root = *dir_;
  bad = tune;
  bad.mutable_initial_params()->set_path("/etc/hostname");
  EXPECT_THAT(run(bad, confined),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("initial_params.path")));
}

// A network whose arrays cannot fit is refused from its inferred shapes before Bind allocates
// any of them: here a 3 TB weight, and the MLP under a 1 MB limit.
TEST_F(WorkerTest, AJobTooLargeForTheWorkersMemoryIsRefusedBeforeAllocating) {
  JobSpec spec = MlpJob();
  spec.set_symbol_json(R"({"nodes":[{"op":"null","name":"data","inputs":[]},
      {"op":"null","name":"fc_huge_weight","inputs":[]},
      {"op":"null","name":"fc_huge_bias","inputs":[]},
      {"op":"FullyConnected","name":"fc_huge","attrs":{"num_hidden":"1000000000"},
       "inputs":[[0,0,0],[1,0,0],[2,0,0]]},
      {"op":"null","name":"softmax_label","inputs":[]},
      {"op":"SoftmaxOutput","name":"softmax","inputs":[[3,0,0],[4,0,0]]}],
      "arg_nodes":[0,1,2,4],"heads":[[5,0,0]]})");
  EXPECT_THAT(RunJob(rt(), spec, [](const JobEvent&) {}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("network"), HasSubstr("this worker may use"),
                             HasSubstr("argument 'fc_huge_weight' float32 (1000000000,784), "
                                       "3136000000000 bytes"))));
  JobEnvironment small;
  small.memory_limit_bytes = 1 << 20;
  const auto nothing = [](const JobEvent&) {};
  EXPECT_THAT(RunJob(rt(), MlpJob(), nothing, nullptr, small),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("may use 1048576")));
}

// Epoch events, and batch events per epoch, of a job run to the end.
struct Counted {
  absl::StatusOr<JobResult> result = absl::UnknownError("not run");
  int epochs = 0, batches = 0;
};
Counted RunCounted(const Runtime& rt, const JobSpec& spec) {
  Counted c;
  c.result = RunJob(rt, spec, [&](const JobEvent& e) {
    c.epochs += e.has_epoch();
    c.batches += e.has_batch();
  });
  return c;
}

TEST_F(WorkerTest, AnImageRecordJobTrains) {
  Counted run = RunCounted(rt(), RecordJob());
  ASSERT_THAT(run.result, IsOk());
  EXPECT_GE(run.result->eval.at("accuracy"), 0.9);
  EXPECT_EQ(run.epochs, 3);
  EXPECT_EQ(run.batches, 3 * (512 / 32 / 4));

  // The worker's part reaches the iterator: half of the indexed records, 8 batches of 32.
  JobSpec half = RecordJob();
  half.set_num_epochs(1);
  half.set_batch_event_every(1);
  half.mutable_data()->set_part_index(1);
  half.mutable_data()->set_num_parts(2);
  run = RunCounted(rt(), half);
  ASSERT_THAT(run.result, IsOk());
  EXPECT_EQ(run.batches, 256 / 32);
}

TEST_F(WorkerTest, ACsvJobTrains) {
  Counted run = RunCounted(rt(), CsvJob());
  ASSERT_THAT(run.result, IsOk());
  EXPECT_GE(run.result->eval.at("accuracy"), 0.9);
  EXPECT_EQ(run.epochs, 3);
  EXPECT_EQ(run.batches, 3 * (512 / 32 / 4));
}

TEST_F(WorkerTest, BadIteratorArgumentsNameTheFieldKeyOrFile) {
  auto run = [&](const JobSpec& spec) {
    return RunJob(rt(), spec, [](const JobEvent&) {}).status();
  };
  JobSpec spec = RecordJob();
  (*spec.mutable_data()->mutable_train_iter())["rand_crap"] = "1";
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("data.train_iter.rand_crap"),
                                        HasSubstr("unknown option 'rand_crap'"))));
  spec = RecordJob();
  (*spec.mutable_data()->mutable_test_iter())["data_shape"] = "(1,28,x)";
  EXPECT_THAT(run(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data.test_iter.data_shape")));
  spec = RecordJob();
  (*spec.mutable_data()->mutable_train_iter())["path_imgrec"] = *dir_ + "/missing.rec";
  spec.mutable_data()->mutable_train_iter()->erase("path_imgidx");
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kNotFound,
                                  AllOf(HasSubstr("data.train_iter"), HasSubstr("missing.rec"))));
  spec = CsvJob();
  (*spec.mutable_data()->mutable_test_iter())["label_csv"] = *dir_ + "/missing-label.csv";
  EXPECT_THAT(run(spec),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("data.test_iter"), HasSubstr("missing-label.csv"))));
  // What the worker sets from the job.
  for (const char* key : {"batch_size", "seed", "shuffle", "part_index", "num_parts"}) {
    spec = CsvJob();
    (*spec.mutable_data()->mutable_train_iter())[key] = "1";
    EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                    AllOf(HasSubstr(absl::StrCat("data.train_iter.", key)),
                                          HasSubstr("the job sets it"))));
  }
  spec = RecordJob();
  (*spec.mutable_data()->mutable_test_iter())["last_batch_handle"] = "discard";
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("data.test_iter.last_batch_handle")));
  // ...which the training iterator may have.
  spec = CsvJob();
  (*spec.mutable_data()->mutable_train_iter())["last_batch_handle"] = "discard";
  spec.set_num_epochs(1);
  EXPECT_THAT(run(spec), IsOk());
  spec = RecordJob();
  spec.mutable_data()->clear_train_iter();
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("data.train_iter"), HasSubstr("required"))));
  spec = RecordJob();
  spec.mutable_data()->set_kind("cifar");
  EXPECT_THAT(run(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("data.kind"), HasSubstr("(mnist, csv, imagerecord)"))));
  spec = MlpJob();
  (*spec.mutable_data()->mutable_test_iter())["data_csv"] = "x.csv";
  EXPECT_THAT(run(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data.test_iter")));
}

// The process's training and KVStore metrics (core/metrics.h) at one moment.
struct Counts {
  double batches, samples, pushed, pulled, pushes, ps_received, ps_sent, rounds, updates;
};

Counts ReadCounts() {
  auto value = [](const char* name) {
    absl::StatusOr<double> v = MetricValue(ProcessMetrics(), name);
    return v.ok() ? *v : 0.0;  // a family not registered yet: nothing counted
  };
  return {value("tessera_worker_batches_total"),     value("tessera_worker_samples_total"),
          value("tessera_kvstore_push_bytes_total"), value("tessera_kvstore_pull_bytes_total"),
          value("tessera_kvstore_push_seconds"),     value("tessera_ps_push_bytes_total"),
          value("tessera_ps_pull_bytes_total"),      value("tessera_ps_rounds_total"),
          value("tessera_ps_updates_total")};
}

TEST_F(WorkerTest, TwoWorkersTrainOnePartitionEachThroughTheParameterServer) {
  kvstore::ServerStoreOptions options;
  options.num_workers = 2;
  auto ps = server::ParameterServer::Start("127.0.0.1:0", options, {.token = "ps-token"});
  ASSERT_THAT(ps, IsOk());
  const JobEnvironment environment{.security = {.token = "ps-token"}};
  {
    // A worker without the cluster's token is turned away before the server sees its Hello.
    JobSpec spec = MlpJob();
    spec.set_kvstore("dist_sync");
    spec.add_ps_hosts((*ps)->address());
    spec.set_num_workers(2);
    EXPECT_THAT(RunJob(rt(), spec, [](const JobEvent&) {}),
                StatusIs(absl::StatusCode::kUnauthenticated,
                         AllOf(HasSubstr((*ps)->address()), HasSubstr("no cluster token"))));
  }
  // Both workers share the fixture's runtime. They deadlocked one run in four while their
  // executors shared the device's temp-space variable (a forward waiting for its pull held
  // the other worker's forward behind it; executors now have their own).
  std::vector<absl::StatusOr<JobResult>> results(2, absl::UnknownError("not run"));
  const Counts before = ReadCounts();
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
      results[rank] = RunJob(
          rt(), spec, [](const JobEvent&) {}, nullptr, environment);
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_THAT(results[0], IsOk());
  ASSERT_THAT(results[1], IsOk());
  EXPECT_GT(results[0]->eval.at("accuracy"), 0.9);
  // dist_sync: both end with the servers' weights.
  EXPECT_EQ(*results[0]->arg_params.at("fc2_weight").AsVector<float>(),
            *results[1]->arg_params.at("fc2_weight").AsVector<float>());

  // The metrics saw the same traffic from both ends: every batch of both workers pushed and
  // pulled every key, and each key's round completed once per batch of a worker.
  const Counts after = ReadCounts();
  const double batches = after.batches - before.batches;
  const double keys = static_cast<double>(results[0]->arg_params.size());
  EXPECT_GT(batches, 0);
  EXPECT_EQ(after.samples - before.samples, 16 * batches);
  EXPECT_GT(after.pushed - before.pushed, 0);
  EXPECT_EQ(after.pushed - before.pushed, after.ps_received - before.ps_received);
  EXPECT_EQ(after.pulled - before.pulled, after.ps_sent - before.ps_sent);
  EXPECT_EQ(after.pushes - before.pushes, batches * keys);
  EXPECT_EQ(after.rounds - before.rounds, batches / 2 * keys);
  EXPECT_EQ(after.updates - before.updates, after.rounds - before.rounds);
}

TEST_F(WorkerTest, CancelStopsAJobWaitingOnTheParameterServerWithinSeconds) {
  // Worker 1 never comes: worker 0's first round can never complete.
  kvstore::ServerStoreOptions options;
  options.num_workers = 2;
  auto ps = server::ParameterServer::Start("127.0.0.1:0", options);
  ASSERT_THAT(ps, IsOk());
  JobSpec spec = MlpJob();
  spec.set_kvstore("dist_sync");
  spec.add_ps_hosts((*ps)->address());
  spec.set_num_workers(2);
  spec.set_batch_event_every(1);
  std::promise<absl::Status> done;
  std::promise<void> started;
  JobManager jobs(rt());
  ASSERT_THAT(jobs.Start(
                  spec,
                  [&](const JobEvent& e) {
                    if (e.has_started()) started.set_value();
                  },
                  [&](absl::Status s) { done.set_value(s); }),
              IsOk());
  std::future<absl::Status> outcome = done.get_future();
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  // Blocked in its first round (no batch completes); give it time to get there.
  EXPECT_EQ(outcome.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  const absl::Time cancelled = absl::Now();
  EXPECT_TRUE(jobs.Cancel());
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the job did not stop within 5 s of Cancel";
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(5));
  EXPECT_THAT(outcome.get(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(jobs.Status().state(), WorkerStatus::IDLE);
}

// A newer run of the running job (same name, another job_id: the job's runner restarted it
// after losing this worker) replaces the stale run: it is cancelled and the new one runs.
// The same run started twice is still refused.
TEST_F(WorkerTest, ANewerRunOfTheRunningJobReplacesTheStaleOne) {
  std::atomic<int> batches{0};
  // Before `jobs`: its thread may use them.
  std::promise<absl::Status> old_done, new_done, other_done;
  JobManager jobs(rt());
  JobSpec old_run = MlpJob();
  old_run.set_job_id("mlp-test.r1");
  old_run.set_num_epochs(1000);  // runs until stopped
  old_run.set_batch_event_every(1);
  ASSERT_THAT(jobs.Start(old_run, [&](const JobEvent& e) { batches += e.has_batch(); },
                         [&](absl::Status s) { old_done.set_value(s); }),
              IsOk());
  for (int i = 0; i < 6000 && batches < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(batches.load(), 1);
  EXPECT_THAT(jobs.Start(old_run, [](const JobEvent&) {}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("one job at a time")));
  JobSpec new_run = MlpJob();
  new_run.set_job_id("mlp-test.r2");
  ASSERT_THAT(jobs.Start(new_run, [](const JobEvent&) {}, [&](absl::Status s) { new_done.set_value(s); }),
              IsOk());
  EXPECT_THAT(old_done.get_future().get(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(new_done.get_future().get(), IsOk());
  EXPECT_THAT(jobs.Params("mlp-test.r2"), IsOk());
  // Another job is no stale run: refused while one runs.
  JobSpec other = MlpJob();
  other.set_name("other");
  other.set_num_epochs(1000);
  ASSERT_THAT(jobs.Start(other, [](const JobEvent&) {}, [&](absl::Status s) { other_done.set_value(s); }),
              IsOk());
  EXPECT_THAT(jobs.Start(new_run, [](const JobEvent&) {}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("'other'")));
  EXPECT_TRUE(jobs.Cancel());
  EXPECT_THAT(other_done.get_future().get(), StatusIs(absl::StatusCode::kCancelled));
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
  auto jobs_with = [](const char* result) {
    return *MetricValue(ProcessMetrics(), "tessera_worker_jobs_total", {{"result", result}});
  };
  const double cancelled = jobs_with("cancelled"), succeeded = jobs_with("succeeded");
  EXPECT_THAT(MetricValue(ProcessMetrics(), "tessera_worker_job_running"), IsOkAndHolds(1.0));
  EXPECT_THAT(MetricValue(ProcessMetrics(), "tessera_worker_samples_per_second"),
              IsOkAndHolds(::testing::Gt(0.0)));
  EXPECT_TRUE(jobs.Cancel());
  EXPECT_THAT(done.get_future().get(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(jobs.Status().state(), WorkerStatus::IDLE);
  EXPECT_EQ(jobs_with("cancelled"), cancelled + 1);
  EXPECT_THAT(MetricValue(ProcessMetrics(), "tessera_worker_job_running"), IsOkAndHolds(0.0));
  EXPECT_THAT(MetricValue(ProcessMetrics(), "tessera_worker_samples_per_second"),
              IsOkAndHolds(0.0));
  EXPECT_FALSE(jobs.Cancel());
  // The next job runs to the end, and its parameters can be fetched.
  ASSERT_THAT(jobs.Start(MlpJob(), [](const JobEvent&) {}, [&](absl::Status s) { second.set_value(s); }), IsOk());
  EXPECT_THAT(second.get_future().get(), IsOk());
  EXPECT_EQ(jobs_with("succeeded"), succeeded + 1);
  auto params = jobs.Params();
  ASSERT_THAT(params, IsOk());
  EXPECT_EQ(params->arg_params().at("fc1_weight").shape_size(), 2);
}

TEST_F(WorkerTest, TheGrpcServiceStreamsEventsAndStatusesOnLoopback) {
  JobManager jobs(rt());
  WorkerServiceImpl service(&jobs);
  auto running = rpc::StartServer({.name = "worker",
                                   .address = "127.0.0.1:0",
                                   .security = {.token = "cluster-token"},
                                   .limits = rpc::kWorkerServiceLimits,
                                   .services = {&service}});
  ASSERT_THAT(running, IsOk());
  std::unique_ptr<grpc::Server> server = std::move(running->server);
  auto dial = [&](std::string token) {
    return Worker::NewStub(rpc::NewChannel({.target = running->address,
                                            .security = {.token = std::move(token)},
                                            .limits = rpc::kWorkerServiceLimits.Peer()})
                               .value());
  };
  // Without the cluster's token no call gets through, admin calls included, and no job ran.
  for (const std::string& token : {std::string(), std::string("not-the-token")}) {
    auto stranger = dial(token);
    grpc::ClientContext run_context;
    auto reader = stranger->RunJob(&run_context, MlpJob());
    JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext cancel_context;
    CancelReply cancelled;
    EXPECT_EQ(stranger->Cancel(&cancel_context, CancelRequest(), &cancelled).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext params_context;
    GetParamsReply params;
    EXPECT_EQ(stranger->GetParams(&params_context, GetParamsRequest(), &params).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(jobs.Status().state(), WorkerStatus::IDLE);
  EXPECT_EQ(jobs.Params().status().code(), absl::StatusCode::kFailedPrecondition);

  auto stub = dial("cluster-token");
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
