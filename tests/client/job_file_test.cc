// Job files: the example files, the defaults, path resolution against the file's folder,
// and one error per way a file can be wrong, each naming the file and the field.
#include "client/job_file.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobs/amp_policy.h"
#include "jobs/job_spec_check.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// The smallest valid file, to which each case adds or changes a line.
constexpr const char* kMinimal = R"(network: {model: lenet}
data: {dir: mnist}
batch_size: 32
epochs: 2
)";

absl::StatusOr<JobFile> Parse(const std::string& yaml, const std::string& base_dir = "/jobs") {
  return ParseJobFile(yaml, base_dir, "job.yaml");
}

// Tests run in the runfiles tree, which mirrors the repository.
TEST(JobFileTest, MlpExampleParses) {
  absl::StatusOr<JobFile> job = LoadJobFile("examples/mnist/mlp.yaml");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.version(), 1u);
  EXPECT_EQ(s.name(), "mlp-mnist");
  EXPECT_EQ(s.model(), "mlp");
  EXPECT_EQ(s.data().kind(), "mnist");
  EXPECT_TRUE(s.data().flat());
  EXPECT_TRUE(s.data().shuffle());
  EXPECT_EQ(s.batch_size(), 64);
  EXPECT_EQ(s.num_epochs(), 10);
  EXPECT_EQ(s.optimizer(), "sgd");
  EXPECT_THAT(s.optimizer_params(),
              UnorderedElementsAre(Pair("learning_rate", "0.1"), Pair("momentum", "0.9")));
  EXPECT_EQ(s.kvstore(), "local");
  EXPECT_EQ(job->num_workers, 1);
  EXPECT_EQ(job->run_dir, "runs/mlp-mnist");
  EXPECT_EQ(s.checkpoint_prefix(), "runs/mlp-mnist/mlp-mnist");
  EXPECT_THAT(s.devices(), ElementsAre("cpu(0)"));
  // "../../.cache/mnist" from examples/mnist/: the repository's .cache/mnist, made absolute,
  // holding the files tools/fetch_mnist.py writes.
  const fs::path expected = fs::absolute(".cache/mnist").lexically_normal();
  EXPECT_EQ(s.data().train_images(), (expected / "train-images-idx3-ubyte").string());
  EXPECT_EQ(s.data().train_labels(), (expected / "train-labels-idx1-ubyte").string());
  EXPECT_EQ(s.data().test_images(), (expected / "t10k-images-idx3-ubyte").string());
  EXPECT_EQ(s.data().test_labels(), (expected / "t10k-labels-idx1-ubyte").string());
}

TEST(JobFileTest, LeNetGpuExampleParses) {
  absl::StatusOr<JobFile> job = LoadJobFile("examples/mnist/lenet_gpu.yaml");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.model(), "lenet");
  EXPECT_THAT(s.devices(), ElementsAre("gpu(0)"));
  EXPECT_EQ(s.kvstore(), "local");
  EXPECT_EQ(job->num_workers, 1);
  EXPECT_EQ(job->num_servers, 0);
  EXPECT_THAT(s.lr_scheduler_params(), UnorderedElementsAre(Pair("max_update", "625")));
}

TEST(JobFileTest, LeNetExampleParses) {
  absl::StatusOr<JobFile> job = LoadJobFile("examples/mnist/lenet.yaml");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.name(), "lenet-mnist");
  EXPECT_EQ(s.model(), "lenet");
  EXPECT_FALSE(s.data().flat());
  EXPECT_EQ(s.batch_size(), 32);
  EXPECT_EQ(s.num_epochs(), 5);
  EXPECT_THAT(s.optimizer_params(),
              UnorderedElementsAre(Pair("learning_rate", "0.1"), Pair("momentum", "0.9"),
                                   Pair("wd", "0.0005")));
  EXPECT_EQ(s.lr_scheduler(), "cosine");
  EXPECT_THAT(s.lr_scheduler_params(), UnorderedElementsAre(Pair("max_update", "625")));
  EXPECT_EQ(s.kvstore(), "dist_sync");
  EXPECT_EQ(job->num_workers, 2);
  EXPECT_EQ(job->num_servers, 1);
  EXPECT_EQ(s.eval_metric(), "acc,ce");
  EXPECT_EQ(job->run_dir, "runs/lenet-mnist");
  EXPECT_TRUE(fs::path(s.data().train_images()).is_absolute());
  // Left for the launcher.
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.num_workers(), 0);
  EXPECT_TRUE(s.ps_hosts().empty());
  EXPECT_EQ(s.data().num_parts(), 0);
}

TEST(JobFileTest, LeNetFineTuningExampleParses) {
  absl::StatusOr<JobFile> job = LoadJobFile("examples/mnist/lenet_finetune.yaml");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.version(), 2u);
  EXPECT_THAT(s.initial_params().path(), EndsWith("runs/lenet-mnist/lenet-mnist-0005.params"));
  EXPECT_TRUE(fs::path(s.initial_params().path()).is_absolute());
  EXPECT_FALSE(s.initial_params().allow_missing());
  EXPECT_THAT(s.fixed_param_names(),
              ElementsAre("conv1_weight", "conv1_bias", "conv2_weight", "conv2_bias"));
  EXPECT_EQ(s.checkpoint_format(), "mxnet");
}

TEST(JobFileTest, Defaults) {
  absl::StatusOr<JobFile> job = ParseJobFile(kMinimal, "/jobs", "dir/my_job.yaml");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.name(), "my_job");  // from the file name
  EXPECT_EQ(s.batch_size(), 32);
  EXPECT_EQ(s.num_epochs(), 2);
  EXPECT_EQ(s.data().kind(), "mnist");
  EXPECT_FALSE(s.data().flat());
  EXPECT_TRUE(s.data().shuffle());
  EXPECT_EQ(s.optimizer(), "sgd");
  EXPECT_THAT(s.optimizer_params(), UnorderedElementsAre(Pair("learning_rate", "0.01")));
  EXPECT_EQ(s.initializer(), "xavier");
  EXPECT_EQ(s.eval_metric(), "acc");
  EXPECT_EQ(job->num_workers, 2);
  EXPECT_EQ(job->num_servers, 1);
  EXPECT_EQ(s.kvstore(), "dist_sync");
  EXPECT_THAT(s.devices(), ElementsAre("cpu(0)"));
  EXPECT_EQ(s.seed(), 0u);
  EXPECT_EQ(job->run_dir, "runs/my_job");
  EXPECT_EQ(s.checkpoint_prefix(), "runs/my_job/my_job");
  EXPECT_EQ(s.batch_event_every(), 0);
  EXPECT_FALSE(s.check_finite());
  EXPECT_EQ(s.version(), 1u);

  EXPECT_EQ(ParseJobFile(kMinimal, "", "")->spec.name(), "job");
}

// check_finite needs a version 4 worker; a later version 2 field does not lower that.
TEST(JobFileTest, CheckFiniteOnOneDeviceWithoutServers) {
  absl::StatusOr<JobFile> job = Parse(std::string(kMinimal) + "kvstore: local\ncluster: {workers: 1}\ncheck_finite: true\ncheckpoint_format: mxnet\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_TRUE(job->spec.check_finite());
  EXPECT_EQ(job->spec.version(), 4u);
  // With parameter servers: refused where every job spec is checked (LoadJobFile, the
  // coordinator, the worker).
  absl::StatusOr<JobFile> dist = Parse(std::string(kMinimal) + "check_finite: true\n");
  ASSERT_THAT(dist.status(), IsOk());
  EXPECT_THAT(jobs::CheckJobSpec(dist->spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("check_finite': only for one device without parameter servers; this job has "
                                 "kvstore 'dist_sync'")));
}

// amp: a dtype (shorthand) or {dtype, loss_scale}; float16 scales dynamically by default,
// which needs one device without parameter servers. JobSpec version 5.
// MXNet's kvstore compression_params: 2bit with its threshold (0.5 by default), checked by
// name, and the pulls' pull_type; only for jobs with parameter servers.
TEST(JobFileTest, GradientCompression) {
  absl::StatusOr<JobFile> job = Parse(std::string(kMinimal) + "compression_params: {type: 2bit}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.compression().type(), "2bit");
  EXPECT_EQ(job->spec.compression().threshold(), 0.5f);
  EXPECT_EQ(job->spec.version(), 6u);
  EXPECT_THAT(jobs::CheckJobSpec(job->spec), IsOk());
  job = Parse(std::string(kMinimal) + "compression_params: {type: 2bit, threshold: 0.25}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.compression().threshold(), 0.25f);
  job = Parse(std::string(kMinimal) + "compression_params: {type: fp16}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.compression().threshold(), 0);
  EXPECT_THAT(jobs::CheckJobSpec(job->spec), IsOk());
  job = Parse(std::string(kMinimal) + "compression_params: {type: 2bit, pull_type: bf16}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.compression().pull_type(), "bf16");
  EXPECT_EQ(job->spec.compression().threshold(), 0.5f);
  EXPECT_THAT(jobs::CheckJobSpec(job->spec), IsOk());
  job = Parse(std::string(kMinimal) + "compression_params: {pull_type: bf16}\n");  // the pulls alone
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.compression().type(), "");
  EXPECT_THAT(jobs::CheckJobSpec(job->spec), IsOk());
  for (const auto& [field, message] : std::vector<std::pair<std::string, std::string>>{
           {"compression_params: {type: 1bit}\n",
            "job field 'compression_params.type': '1bit' is not a compression (known: 2bit, fp16)"},
           {"compression_params: {type: 2bit, threshold: 0}\n",
            "job field 'compression_params.threshold': 2bit compression's threshold 0 must be a positive number"},
           {"compression_params: {type: fp16, threshold: 0.5}\n", "fp16 compression takes no threshold"},
           {"compression_params: {type: 2bit, threshold: -1}\n", "must be a positive number"},
           {"compression_params: {type: 2bit, pull_type: fp8}\n",
            "job field 'compression_params.pull_type': 'fp8' is not a compression of the pulls (known: bf16)"},
           {"kvstore: local\ncluster: {workers: 1}\ncompression_params: {pull_type: bf16}\n",
            "job field 'compression_params': compresses the transfers to and from parameter servers; this job "
            "has kvstore 'local'"}}) {
    absl::StatusOr<JobFile> refused = Parse(std::string(kMinimal) + field);
    ASSERT_THAT(refused.status(), IsOk()) << field;
    EXPECT_THAT(jobs::CheckJobSpec(refused->spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << field;
  }
  EXPECT_THAT(Parse(std::string(kMinimal) + "compression_params: {threshold: 0.5}\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a type (2bit, fp16) or a pull_type")));
  EXPECT_THAT(Parse(std::string(kMinimal) + "compression_params: {type: 2bit, threshold: big}\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("compression_params.threshold"), HasSubstr("expected a number"))));
}

TEST(JobFileTest, MixedPrecision) {
  absl::StatusOr<JobFile> bf16 = Parse(std::string(kMinimal) + "amp: bfloat16\n");
  ASSERT_THAT(bf16.status(), IsOk());
  EXPECT_EQ(bf16->spec.amp().dtype(), "bfloat16");
  EXPECT_EQ(bf16->spec.version(), 5u);
  EXPECT_THAT(jobs::CheckJobSpec(bf16->spec), IsOk());  // dist_sync: no loss scale needed
  absl::StatusOr<std::optional<graph::AmpOptions>> options = jobs::AmpOptionsOf(bf16->spec);
  ASSERT_THAT(options.status(), IsOk());
  ASSERT_TRUE(options->has_value());
  EXPECT_EQ((*options)->dtype, DType::kBFloat16);
  EXPECT_FALSE((*options)->dynamic_loss_scale);

  absl::StatusOr<JobFile> fixed = Parse(std::string(kMinimal) + "amp: {dtype: float16, loss_scale: 1024}\n");
  ASSERT_THAT(fixed.status(), IsOk());
  options = jobs::AmpOptionsOf(fixed->spec);
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ((*options)->loss_scale, 1024);
  EXPECT_FALSE((*options)->dynamic_loss_scale);

  absl::StatusOr<JobFile> dist = Parse(std::string(kMinimal) + "amp: {dtype: float16}\n");
  ASSERT_THAT(dist.status(), IsOk());
  EXPECT_THAT(jobs::CheckJobSpec(dist->spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("job field 'amp.loss_scale': dynamic loss scaling (float16's default)"),
                             HasSubstr("kvstore 'dist_sync'"))));
  absl::StatusOr<JobFile> local =
      Parse(std::string(kMinimal) + "kvstore: local\ncluster: {workers: 1}\namp: float16\n");
  ASSERT_THAT(local.status(), IsOk());
  options = jobs::AmpOptionsOf(local->spec);
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_TRUE((*options)->dynamic_loss_scale);

  for (const auto& [field, message] : std::vector<std::pair<std::string, std::string>>{
           {"amp: float8\n", "job field 'amp.dtype': 'float8' is not bfloat16 or float16"},
           {"amp: {dtype: float16, loss_scale: -2}\n", "job field 'amp.loss_scale': '-2' is not a positive number"},
           {"kvstore: local\ncluster: {workers: 1}\ncheck_finite: true\namp: float16\n", "check_finite"}}) {
    absl::StatusOr<JobFile> job = Parse(std::string(kMinimal) + field);
    ASSERT_THAT(job.status(), IsOk()) << field;
    EXPECT_THAT(jobs::CheckJobSpec(job->spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << field;
  }
  EXPECT_THAT(Parse(std::string(kMinimal) + "amp: {loss_scale: 8}\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("amp: needs a dtype")));
  EXPECT_THAT(Parse(std::string(kMinimal) + "amp: {dtype: float16, scale: 8}\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale")));
}

TEST(JobFileTest, EveryFieldGiven) {
  absl::StatusOr<JobFile> job = Parse(R"(
name: full
network: {model: mlp}
data:
  kind: mnist
  train_images: a/ti
  train_labels: a/tl
  flat: yes
  shuffle: false
batch_size: 8
epochs: 3
optimizer:
  name: adam
  params: {learning_rate: 1e-3, beta1: .8, wd: 0}
  lr_scheduler: {name: cosine, params: {max_update: 300, final_lr: 1e-5}}
initializer: uniform
eval_metric: [acc, ce, top_k_accuracy_3]
kvstore: dist_async
cluster: {workers: 3, servers: 2}
devices: [cpu(0), cpu(1)]
seed: 18446744073709551615
checkpoint: false
run_dir: /tmp/out
)");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.name(), "full");
  EXPECT_TRUE(s.data().flat());
  EXPECT_FALSE(s.data().shuffle());
  EXPECT_EQ(s.data().train_images(), "/jobs/a/ti");
  EXPECT_EQ(s.data().test_images(), "");  // no test data: fine
  EXPECT_EQ(s.optimizer(), "adam");
  // Numbers stay as the YAML text wrote them.
  EXPECT_THAT(s.optimizer_params(), UnorderedElementsAre(Pair("learning_rate", "1e-3"),
                                                         Pair("beta1", ".8"), Pair("wd", "0")));
  EXPECT_EQ(s.lr_scheduler(), "cosine");
  EXPECT_THAT(s.lr_scheduler_params(),
              UnorderedElementsAre(Pair("max_update", "300"), Pair("final_lr", "1e-5")));
  EXPECT_EQ(s.initializer(), "uniform");
  EXPECT_EQ(s.eval_metric(), "acc,ce,top_k_accuracy_3");
  EXPECT_EQ(s.kvstore(), "dist_async");
  EXPECT_EQ(job->num_workers, 3);
  EXPECT_EQ(job->num_servers, 2);
  EXPECT_EQ(job->replicas, 2);  // the default with two servers
  EXPECT_THAT(s.devices(), ElementsAre("cpu(0)", "cpu(1)"));
  EXPECT_EQ(s.seed(), 18446744073709551615u);
  EXPECT_EQ(s.checkpoint_prefix(), "");
  EXPECT_EQ(job->run_dir, "/tmp/out");
}

TEST(JobFileTest, ShortForms) {
  absl::StatusOr<JobFile> job =
      Parse(std::string(kMinimal) + "optimizer: rmsprop\ndevices: cpu(0)\n" +
            "eval_metric: ce\ncluster: {workers: 1}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.optimizer(), "rmsprop");
  EXPECT_TRUE(job->spec.optimizer_params().empty());
  EXPECT_THAT(job->spec.devices(), ElementsAre("cpu(0)"));
  EXPECT_EQ(job->spec.eval_metric(), "ce");
  EXPECT_EQ(job->spec.kvstore(), "local");  // one worker
  EXPECT_EQ(job->replicas, 1);                // one server: nothing to copy to
  job = Parse(std::string(kMinimal) + "cluster: {workers: 2, servers: 2, replicas: 1}\n");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->replicas, 1);
}

TEST(JobFileTest, TheLaunchersClusterWinsOverTheFiles) {
  // A one-worker file with a dist kvstore and no servers, launched as `-n 3 -s 2`: the file's
  // cluster alone would be refused; the launcher's is checked instead.
  const std::string one_worker =
      std::string(kMinimal) + "kvstore: dist_async\ncluster: {workers: 1, servers: 0}\n";
  EXPECT_THAT(Parse(one_worker).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.servers")));
  absl::StatusOr<JobFile> job = ParseJobFile(one_worker, "/jobs", "job.yaml", {3, 2});
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->num_workers, 3);
  EXPECT_EQ(job->num_servers, 2);
  EXPECT_EQ(job->replicas, 2);  // the launcher's two servers back each other up
  EXPECT_EQ(job->spec.kvstore(), "dist_async");
  // Without a kvstore, more than one worker means dist_sync, whoever set the size.
  job = ParseJobFile(std::string(kMinimal) + "cluster: {workers: 1}\n", "/jobs", "job.yaml",
                     {.workers = 2});
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.kvstore(), "dist_sync");
  EXPECT_EQ(job->num_servers, 1);
  // A local kvstore cannot take the launcher's workers; the message names the field.
  EXPECT_THAT(ParseJobFile(std::string(kMinimal) + "kvstore: local\n", "/jobs", "job.yaml",
                           {.workers = 2})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("kvstore"), HasSubstr("2 workers"))));
  EXPECT_THAT(ParseJobFile(kMinimal, "/jobs", "job.yaml", {.servers = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 server")));
}

TEST(JobFileTest, DataParallelGpusOnOneWorker) {
  // MXNet's names for the device reduction; one worker and no servers.
  for (const char* kv : {"device", "nccl", "local_allreduce_device", "local_allreduce_cpu"}) {
    absl::StatusOr<JobFile> job = Parse(std::string(kMinimal) + "kvstore: " + kv +
                                        "\ndevices: [gpu(0), gpu(1)]\ncluster: {workers: 1}\n");
    ASSERT_THAT(job.status(), IsOk()) << kv;
    EXPECT_EQ(job->spec.kvstore(), kv);
    EXPECT_THAT(job->spec.devices(), ElementsAre("gpu(0)", "gpu(1)"));
  }
}

TEST(JobFileTest, RelativePathsResolveAgainstBaseDir) {
  const std::string files = R"(network: {model: lenet}
batch_size: 1
epochs: 1
data:
  train_images: ../shared/train-images
  train_labels: labels/train
  test_images: /abs/t10k-images
  test_labels: ./t10k-labels
)";
  absl::StatusOr<JobFile> job = Parse(files, "/jobs/mnist");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.data().train_images(), "/jobs/shared/train-images");
  EXPECT_EQ(job->spec.data().train_labels(), "/jobs/mnist/labels/train");
  EXPECT_EQ(job->spec.data().test_images(), "/abs/t10k-images");
  EXPECT_EQ(job->spec.data().test_labels(), "/jobs/mnist/t10k-labels");

  job = Parse(kMinimal, "/jobs/mnist/");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.data().train_images(), "/jobs/mnist/mnist/train-images-idx3-ubyte");

  // No base_dir: paths stay relative (to whoever opens them).
  job = Parse(files, "");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.data().train_labels(), "labels/train");
  EXPECT_EQ(job->spec.data().train_images(), "../shared/train-images");
}

TEST(JobFileTest, CsvJobParses) {
  absl::StatusOr<JobFile> job = Parse(R"(network: {model: mlp}
batch_size: 16
epochs: 1
data:
  kind: csv
  train:
    data_csv: csv/train-data.csv
    label_csv: /abs/train-label.csv
    data_shape: [784]
    dtype: float32
    skip_bad: true
  test:
    data_csv: ../test.csv
    data_shape: (784,)
  shuffle: false
)",
                                      "/jobs/digits");
  ASSERT_THAT(job.status(), IsOk());
  const DataSpec& d = job->spec.data();
  EXPECT_EQ(d.kind(), "csv");
  EXPECT_FALSE(d.shuffle());
  EXPECT_THAT(
      d.train_iter(),
      UnorderedElementsAre(Pair("data_csv", "/jobs/digits/csv/train-data.csv"),
                           Pair("label_csv", "/abs/train-label.csv"), Pair("data_shape", "(784)"),
                           Pair("dtype", "float32"), Pair("skip_bad", "true")));
  EXPECT_THAT(d.test_iter(), UnorderedElementsAre(Pair("data_csv", "/jobs/test.csv"),
                                                  Pair("data_shape", "(784,)")));
  EXPECT_EQ(d.train_images(), "");
  EXPECT_FALSE(d.flat());
}

TEST(JobFileTest, ImageRecordJobParses) {
  absl::StatusOr<JobFile> job = Parse(R"(network: {model: lenet}
batch_size: 16
epochs: 1
data:
  kind: imagerecord
  train: {path_imgrec: rec/train.rec, path_imgidx: ./rec/train.idx, data_shape: [3, 28, 28],
          scale: 0.00392156862745098, rand_crop: 1, mean_r: 123.68, label_width: 1}
  test: {path_imgrec: /data/test.rec, data_shape: '(3,28,28)', prefetch_buffer: 0}
)",
                                      "/jobs/img");
  ASSERT_THAT(job.status(), IsOk());
  const DataSpec& d = job->spec.data();
  EXPECT_EQ(d.kind(), "imagerecord");
  EXPECT_TRUE(d.shuffle());  // the default, as for mnist
  // Values as the YAML text wrote them, the list as MXNet's tuple.
  EXPECT_THAT(d.train_iter(),
              UnorderedElementsAre(Pair("path_imgrec", "/jobs/img/rec/train.rec"),
                                   Pair("path_imgidx", "/jobs/img/rec/train.idx"),
                                   Pair("data_shape", "(3,28,28)"),
                                   Pair("scale", "0.00392156862745098"), Pair("rand_crop", "1"),
                                   Pair("mean_r", "123.68"), Pair("label_width", "1")));
  EXPECT_THAT(d.test_iter(),
              UnorderedElementsAre(Pair("path_imgrec", "/data/test.rec"),
                                   Pair("data_shape", "(3,28,28)"), Pair("prefetch_buffer", "0")));
  // No test set: fine. No base_dir: paths stay relative.
  job = Parse(R"(network: {model: lenet}
batch_size: 16
epochs: 1
data: {kind: imagerecord, train: {path_imgrec: train.rec, data_shape: [1, 28, 28]}}
)",
              "");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_THAT(job->spec.data().train_iter(), UnorderedElementsAre(Pair("path_imgrec", "train.rec"),
                                                                  Pair("data_shape", "(1,28,28)")));
  EXPECT_TRUE(job->spec.data().test_iter().empty());
}

TEST(JobFileTest, SymbolFileIsReadRelativeToBaseDir) {
  const std::string dir = TempDir() + "/symbols";
  fs::create_directories(dir);
  const std::string json = R"({"nodes": [], "arg_nodes": [], "heads": []})";
  std::ofstream(dir + "/net-symbol.json") << json;
  const std::string yaml =
      "network: {symbol_file: net-symbol.json}\ndata: {dir: d}\nbatch_size: 1\nepochs: 1\n";
  absl::StatusOr<JobFile> job = Parse(yaml, dir);
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.network_case(), JobSpec::kSymbolJson);
  EXPECT_EQ(job->spec.symbol_json(), json);

  EXPECT_THAT(
      Parse(yaml, TempDir()).status(),
      StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("job.yaml:1: network.symbol_file"),
                                                  HasSubstr(TempDir() + "/net-symbol.json"))));
}

TEST(JobFileTest, LoadJobFileNamesAMissingFile) {
  EXPECT_THAT(LoadJobFile("no/such/job.yaml").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/job.yaml")));
}

TEST(JobFileTest, LoadJobFileResolvesAgainstItsFolder) {
  const std::string dir = TempDir() + "/load";
  fs::create_directories(dir);
  std::ofstream(dir + "/j.yaml") << kMinimal;
  absl::StatusOr<JobFile> job = LoadJobFile(dir + "/j.yaml");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.name(), "j");
  EXPECT_EQ(job->spec.data().train_images(),
            (fs::path(dir) / "mnist/train-images-idx3-ubyte").lexically_normal().string());
}

struct ErrorCase {
  const char* what;
  std::string yaml;
  std::string message;  // expected in the error, after "job.yaml"
};

// kMinimal with `line` appended (a later key of the same name is a duplicate).
std::string With(const std::string& line) { return std::string(kMinimal) + line + "\n"; }
// kMinimal without the line starting with `key`, plus `line`.
std::string Replace(const std::string& key, const std::string& line) {
  std::stringstream in(kMinimal);
  std::string out, l;
  while (std::getline(in, l)) {
    if (l.rfind(key + ":", 0) != 0) out += l + "\n";
  }
  return out + line + "\n";
}

TEST(JobFileTest, FineTuningFromAnMxnetCheckpoint) {
  absl::StatusOr<JobFile> job = Parse(Replace("network", R"(network:
  symbol_file: /dev/null
  params: zoo/resnet-0000.params
  allow_missing: true
  allow_extra: yes
  fixed_param_names: [conv0_weight, bn0_gamma]
checkpoint_format: mxnet)"),
                                      "/jobs");
  ASSERT_THAT(job.status(), IsOk());
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.version(), 2u) << "older workers must refuse what they would ignore";
  EXPECT_EQ(s.initial_params().path(), "/jobs/zoo/resnet-0000.params");
  EXPECT_TRUE(s.initial_params().allow_missing());
  EXPECT_TRUE(s.initial_params().allow_extra());
  EXPECT_THAT(s.fixed_param_names(), ElementsAre("conv0_weight", "bn0_gamma"));
  EXPECT_EQ(s.checkpoint_format(), "mxnet");

  job = Parse(Replace("network", "network: {model: lenet, params: p.params}"));
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_FALSE(job->spec.initial_params().allow_missing());
  EXPECT_FALSE(job->spec.initial_params().allow_extra());
  EXPECT_EQ(job->spec.version(), 2u);
  job = Parse(kMinimal);
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.version(), 1u) << "a job using nothing new runs on older workers";
  EXPECT_FALSE(job->spec.has_initial_params());
}

class JobFileErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JobFileErrorTest, NamesTheFileAndField) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<JobFile> job = Parse(c.yaml);
  EXPECT_THAT(job.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job.yaml")));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.message)) << c.yaml;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, JobFileErrorTest,
    ::testing::Values(
        ErrorCase{"TopLevelTypo", With("epoch: 5"),
                  "job.yaml:5: epoch: unknown key (did you mean 'epochs'?)"},
        ErrorCase{"NestedTypo", Replace("data", "data: {dir: d, shufle: true}"),
                  "job.yaml:4: data.shufle: unknown key (did you mean 'shuffle'?)"},
        ErrorCase{"OptimizerTypo", With("optimizer: {name: sgd, parms: {momentum: 0.9}}"),
                  "optimizer.parms: unknown key"},
        ErrorCase{"ClusterTypo", With("cluster: {worker: 2}"), "cluster.worker: unknown key"},
        ErrorCase{"SchedulerUnknown", With("optimizer: {name: sgd, lr_scheduler: linear}"),
                  "optimizer.lr_scheduler: unknown lr scheduler"},
        ErrorCase{"SchedulerBadArgument",
                  With("optimizer: {lr_scheduler: {name: cosine, params: {max_update: -3}}}"),
                  "optimizer.lr_scheduler: CosineScheduler: max_update must be >= 1"},
        ErrorCase{"SchedulerWithoutName",
                  With("optimizer: {lr_scheduler: {params: {max_update: 3}}}"),
                  "optimizer.lr_scheduler: needs a name"},
        ErrorCase{"NetworkTypo", Replace("network", "network: {modle: lenet}"),
                  "network.modle: unknown key"},
        ErrorCase{"Duplicate", With("epochs: 3"), "job.yaml:5: epochs: given twice"},
        ErrorCase{"AllowMissingWithoutParams",
                  Replace("network", "network: {model: lenet, allow_missing: true}"),
                  "network.allow_missing: needs network.params"},
        ErrorCase{"AllowExtraNotABool",
                  Replace("network", "network: {model: lenet, params: p, allow_extra: some}"),
                  "network.allow_extra: expected true or false, got \"some\""},
        ErrorCase{"ParamsEmpty", Replace("network", "network: {model: lenet, params: ''}"),
                  "network.params: must not be empty"},
        ErrorCase{"FixedParamNamesNotStrings",
                  Replace("network", "network: {model: lenet, fixed_param_names: [{a: 1}]}"),
                  "network.fixed_param_names[0]: expected a string"},
        ErrorCase{"CheckFiniteNotABool", With("check_finite: maybe"),
                  "check_finite: expected true or false, got \"maybe\""},
        ErrorCase{"UnknownCheckpointFormat", With("checkpoint_format: onnx"),
                  "checkpoint_format: "},
        ErrorCase{"EpochsNotANumber", Replace("epochs", "epochs: ten"),
                  "epochs: expected an integer, got \"ten\""},
        ErrorCase{"EpochsFraction", Replace("epochs", "epochs: 2.5"),
                  "epochs: expected an integer"},
        ErrorCase{"EpochsZero", Replace("epochs", "epochs: 0"), "epochs: must be >= 1"},
        ErrorCase{"BatchSizeList", Replace("batch_size", "batch_size: [64]"),
                  "batch_size: expected an integer, got a list"},
        ErrorCase{"BatchSizeNegative", Replace("batch_size", "batch_size: -4"),
                  "batch_size: must be >= 1"},
        ErrorCase{"NetworkMissing", Replace("network", ""), "job.yaml: network: required"},
        ErrorCase{"DataMissing", Replace("data", ""), "job.yaml: data: required"},
        ErrorCase{"EpochsMissing", Replace("epochs", ""), "job.yaml: epochs: required"},
        ErrorCase{"BatchSizeMissing", Replace("batch_size", ""), "job.yaml: batch_size: required"},
        ErrorCase{"NetworkEmpty", Replace("network", "network: {}"),
                  "network: one of model (mlp, lenet, resnet18_cifar) or symbol_file is required"},
        ErrorCase{"NetworkBoth", Replace("network", "network: {model: mlp, symbol_file: x.json}"),
                  "network: give one of model and symbol_file, not both"},
        ErrorCase{"NetworkNotAMap", Replace("network", "network: lenet"),
                  "network: expected a map, got \"lenet\""},
        ErrorCase{"UnknownModel", Replace("network", "network: {model: resnet}"),
                  "network.model: unknown built-in model 'resnet' (mlp, lenet, resnet18_cifar)"},
        ErrorCase{"LearningRateNotANumber",
                  With("optimizer:\n  name: sgd\n  params: {learning_rate: fast}"),
                  "job.yaml:7: optimizer.params.learning_rate: sgd: invalid value 'fast'"},
        ErrorCase{"LearningRateList", With("optimizer: {params: {learning_rate: [0.1]}}"),
                  "optimizer.params.learning_rate: expected a number, got a list"},
        ErrorCase{"LearningRateNegative", With("optimizer: {params: {learning_rate: -1}}"),
                  "optimizer.params.learning_rate: sgd: invalid value '-1'"},
        ErrorCase{"MomentumOutOfRange",
                  With("optimizer: {params: {learning_rate: 0.1, momentum: 2}}"),
                  "optimizer.params.momentum: sgd: invalid value '2'"},
        ErrorCase{"UnknownOptimizerParam", With("optimizer: {params: {lr: 0.1}}"),
                  "optimizer.params.lr: sgd: unknown parameter 'lr'"},
        ErrorCase{"UnknownOptimizer", With("optimizer: {name: sgdd}"),
                  "optimizer.name: unknown optimizer \"sgdd\""},
        ErrorCase{"UnknownOptimizerShort", With("optimizer: nesterov"),
                  "optimizer: unknown optimizer \"nesterov\""},
        ErrorCase{"TrainImagesMissing", Replace("data", "data: {train_labels: l}"),
                  "data.train_images (or data.dir): required"},
        ErrorCase{"DirAndFiles", Replace("data", "data: {dir: d, train_images: x}"),
                  "data.train_images: give either data.dir or the files, not both"},
        ErrorCase{"TestImagesAlone",
                  Replace("data", "data: {train_images: a, train_labels: b, test_images: c}"),
                  "data.test_images: give both test_images and test_labels, or neither"},
        ErrorCase{"TrainImagesList", Replace("data", "data: {train_images: [a], train_labels: b}"),
                  "data.train_images: expected a string, got a list"},
        ErrorCase{"FlatNotABool", Replace("data", "data: {dir: d, flat: maybe}"),
                  "data.flat: expected true or false, got \"maybe\""},
        ErrorCase{"UnknownDataKind", Replace("data", "data: {kind: cifar, dir: d}"),
                  "data.kind: unknown data kind 'cifar' (mnist, csv, imagerecord)"},
        ErrorCase{"MnistWithTrain", Replace("data", "data: {dir: d, train: {data_csv: a}}"),
                  "data.train: only for kinds csv and imagerecord"},
        ErrorCase{"MnistWithTest", Replace("data", "data: {dir: d, test: {data_csv: a}}"),
                  "data.test: only for kinds csv and imagerecord"},
        ErrorCase{"CsvWithDir", Replace("data", "data: {kind: csv, dir: d, train: {}}"),
                  "data.dir: only for kind mnist"},
        ErrorCase{"ImageRecordWithFlat",
                  Replace("data", "data: {kind: imagerecord, flat: true, train: {}}"),
                  "data.flat: only for kind mnist"},
        ErrorCase{"ImageRecordWithTrainImages",
                  Replace("data", "data: {kind: imagerecord, train_images: a}"),
                  "data.train_images: only for kind mnist"},
        ErrorCase{"CsvTrainMissing", Replace("data", "data: {kind: csv}"),
                  "job.yaml: data.train (the CSVIter arguments): required"},
        ErrorCase{"CsvDataCsvMissing", Replace("data", "data: {kind: csv, train: {data_shape: 4}}"),
                  "job.yaml:4: data.train.data_csv: required"},
        ErrorCase{"ImageRecordDataShapeMissing",
                  Replace("data", "data:\n  kind: imagerecord\n  train: {path_imgrec: a.rec}"),
                  "job.yaml:6: data.train.data_shape: required"},
        ErrorCase{"ImageRecordTestPathMissing",
                  Replace("data",
                          "data:\n  kind: imagerecord\n"
                          "  train: {path_imgrec: a.rec, data_shape: [1, 2, 2]}\n"
                          "  test: {data_shape: [1, 2, 2]}"),
                  "job.yaml:7: data.test.path_imgrec: required"},
        ErrorCase{"UnknownIterArg",
                  Replace("data",
                          "data:\n  kind: imagerecord\n  train:\n"
                          "    path_imgrec: a.rec\n    data_shape: [1, 28, 28]\n"
                          "    rand_crap: 1"),
                  "job.yaml:9: data.train.rand_crap: ImageRecordIter: unknown option 'rand_crap'"},
        ErrorCase{"BadIterValue",
                  Replace("data",
                          "data:\n  kind: imagerecord\n"
                          "  train: {path_imgrec: a.rec, data_shape: [1, 2, 2]}\n"
                          "  test: {path_imgrec: b.rec, data_shape: [1, 2, 2], scale: big}"),
                  "data.test.scale: ImageRecordIter: bad value 'big' for option 'scale'"},
        ErrorCase{"BadShape",
                  Replace("data", "data: {kind: csv, train: {data_csv: a, data_shape: [2, x]}}"),
                  "data.train.data_shape: CSVIter: bad value '(2,x)' for option 'data_shape'"},
        ErrorCase{"IterArgMap",
                  Replace("data", "data: {kind: csv, train: {data_csv: {a: 1}, data_shape: 2}}"),
                  "data.train.data_csv: expected a value or a list such as [3, 28, 28], got a map"},
        ErrorCase{"IterArgNull",
                  Replace("data",
                          "data: {kind: csv, train: {data_csv: a, data_shape: 2, "
                          "label_csv: }}"),
                  "data.train.label_csv: expected a value or a list such as [3, 28, 28], got "
                  "nothing"},
        ErrorCase{"IterArgNestedList",
                  Replace("data", "data: {kind: csv, train: {data_csv: a, data_shape: [[2], 3]}}"),
                  "data.train.data_shape[0]: expected a number, got a list"},
        ErrorCase{"IterArgsNotAMap", Replace("data", "data: {kind: imagerecord, train: a.rec}"),
                  "data.train: expected a map, got \"a.rec\""},
        ErrorCase{"IterArgsTogether",
                  Replace("data",
                          "data: {kind: csv, train: {data_csv: a, data_shape: 2, "
                          "round_batch: true, last_batch_handle: pad}}"),
                  "data.train: CSVIter: give round_batch (MXNet's) or last_batch_handle, not both"},
        ErrorCase{"JobSetBatchSize",
                  Replace("data",
                          "data: {kind: csv, train: {data_csv: a, data_shape: 2, "
                          "batch_size: 8}}"),
                  "data.train.batch_size: the job sets it (batch_size)"},
        ErrorCase{
            "JobSetSeed",
            Replace("data", "data: {kind: csv, train: {data_csv: a, data_shape: 2, seed: 1}}"),
            "data.train.seed: the job sets it (seed)"},
        ErrorCase{"JobSetShuffle",
                  Replace("data",
                          "data: {kind: csv, train: {data_csv: a, data_shape: 2, "
                          "shuffle: true}}"),
                  "data.train.shuffle: the job sets it (data.shuffle)"},
        ErrorCase{"JobSetPartIndex",
                  Replace("data",
                          "data: {kind: imagerecord, train: {path_imgrec: a, "
                          "data_shape: [1, 2, 2], part_index: 0}}"),
                  "data.train.part_index: the job sets it"},
        ErrorCase{"JobSetNumParts",
                  Replace("data",
                          "data: {kind: imagerecord, train: {path_imgrec: a, "
                          "data_shape: [1, 2, 2]}, test: {num_parts: 2}}"),
                  "data.test.num_parts: the job sets it"},
        ErrorCase{"JobSetTestLastBatch",
                  Replace("data",
                          "data: {kind: csv, train: {data_csv: a, data_shape: 2}, "
                          "test: {data_csv: b, data_shape: 2, last_batch_handle: discard}}"),
                  "data.test.last_batch_handle: the job sets it (the test iterator pads"},
        ErrorCase{"UnknownKVStore", With("kvstore: dist"),
                  "kvstore: unknown KVStore type \"dist\""},
        ErrorCase{"LocalWithWorkers", With("kvstore: local\ncluster: {workers: 2}"),
                  "kvstore: \"local\" would train"},
        ErrorCase{"NcclWithWorkers", With("kvstore: nccl\ncluster: {workers: 2}"),
                  "kvstore: \"nccl\" would train"},
        ErrorCase{"NoWorkers", With("cluster: {workers: 0}"), "cluster.workers: must be >= 1"},
        ErrorCase{"DistWithoutServers", With("cluster: {workers: 2, servers: 0}"),
                  "cluster.servers: kvstore dist_sync needs"},
        ErrorCase{"ReplicasWithOneServer", With("cluster: {workers: 2, replicas: 2}"),
                  "cluster.replicas: must be 1, or 2 with at least 2 servers (this cluster has 1)"},
        ErrorCase{"ThreeReplicas", With("cluster: {workers: 2, servers: 3, replicas: 3}"),
                  "cluster.replicas: must be 1, or 2"},
        ErrorCase{"NoReplicas", With("cluster: {workers: 2, servers: 2, replicas: 0}"),
                  "cluster.replicas: must be >= 1"},
        ErrorCase{"BadDevice", With("devices: [cpu(0), tpu(0)]"), "job.yaml:5: devices[1]"},
        ErrorCase{"DevicesMap", With("devices: {cpu: 0}"),
                  "devices: expected a list of strings, got a map"},
        ErrorCase{"UnknownMetric", With("eval_metric: accuracyy"),
                  "eval_metric: unknown metric 'accuracyy'"},
        ErrorCase{"UnknownInitializer", With("initializer: zeros"),
                  "initializer: unknown initializer 'zeros'"},
        ErrorCase{"NegativeSeed", With("seed: -1"), "seed: expected an integer >= 0, got \"-1\""},
        ErrorCase{"BadName", With("name: my job/1"), "name: \"my job/1\" must be letters"},
        ErrorCase{"CheckpointNotABool", With("checkpoint: every"),
                  "checkpoint: expected true or false"},
        ErrorCase{"EmptyRunDir", With("run_dir: ''"), "run_dir: must not be empty"},
        ErrorCase{"NotAMap", "- a\n- b\n", "job.yaml:1: the job: expected a map, got a list"},
        ErrorCase{"Empty", "", "job.yaml: empty job file"},
        ErrorCase{"Syntax", "network: {model: lenet\ndata: [\n", "job.yaml:"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.what; });

}  // namespace
}  // namespace tessera::client
