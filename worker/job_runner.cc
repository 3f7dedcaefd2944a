#include "worker/job_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/confined_path.h"
#include "core/memory_limit.h"
#include "core/status_macros.h"
#include "examples/models.h"
#include "graph/graph_def.h"
#include "graph/symbol_json.h"
#include "io/create_data_iter.h"
#include "jobs/amp_policy.h"
#include "jobs/iterator_rules.h"
#include "jobs/recovery_policy.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/kvstore.h"
#include "kvstore/lr_scheduler.h"
#include "ndarray/params_file.h"
#include "spdlog/spdlog.h"
#include "train/checkpoint.h"
#include "train/initializer.h"
#include "train/module.h"
#include "worker/worker_metrics.h"

namespace tessera::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Every job error names its field (jobs/job_spec_check.h).
absl::Status FieldError(absl::StatusCode code, const std::string& field, absl::string_view what) {
  return jobs::JobFieldError(code, field, what);
}

// The error with "network: " in front, keeping its code.
absl::Status InNetwork(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("network: ", status.message()));
}

absl::StatusOr<graph::Symbol> BuildNetwork(const JobSpec& spec) {
  absl::StatusOr<graph::Symbol> net;
  switch (spec.network_case()) {
    case JobSpec::kGraph: net = graph::FromGraphDef(spec.graph()); break;
    case JobSpec::kSymbolJson: net = graph::SymbolFromJson(spec.symbol_json()); break;
    case JobSpec::kModel:
      net = examples::BuiltinModel(spec.model());
      if (!net.ok()) return FieldError(net.status().code(), "network.model", net.status().message());
      break;
    default:
      return FieldError(absl::StatusCode::kInvalidArgument, "network",
                        "none given (a GraphDef, symbol JSON or built-in model)");
  }
  if (!net.ok()) return InNetwork(net.status());
  return net;
}

struct Data {
  std::unique_ptr<io::DataIter> train, test;
};

// The iterator `iter_name` (the test iterator when `test`) from the arguments a job gives (at
// `field`, e.g. "data.train_iter"; jobs::CheckJobSpec has checked each) plus those the job
// sets itself (jobs/iterator_rules.h). The iterator's own errors (a missing file, an empty
// part, arguments wrong together) name the field and keep their code.
absl::StatusOr<std::unique_ptr<io::DataIter>> BuildIter(const Runtime& rt, const JobSpec& spec,
                                                        const std::string& iter_name,
                                                        const std::string& field,
                                                        const io::IterKwargs& given, bool test) {
  io::IterKwargs kwargs = jobs::JobSetIterArguments(spec, test);
  kwargs.insert(given.begin(), given.end());
  kwargs.emplace("silent", "1");  // job events report progress; a job may still say "0"
  absl::StatusOr<std::unique_ptr<io::DataIter>> iter = io::CreateDataIter(rt, iter_name, kwargs);
  if (!iter.ok()) return FieldError(iter.status().code(), field, iter.status().message());
  return iter;
}

// The file arguments of `kwargs` (given at `field`), each resolved under `root`; unchanged
// when `root` is empty. `names` maps an argument to the job's field when the job names it
// otherwise (kind mnist: "image" is data.train_images).
absl::Status ConfineFiles(const std::string& root, const std::string& field,
                          const std::map<std::string, std::string>& names, io::IterKwargs& kwargs) {
  if (root.empty()) return absl::OkStatus();
  for (auto& [key, value] : kwargs) {
    if (!io::IsFileArgument(key) || value.empty()) continue;
    const auto name = names.find(key);
    const std::string what = absl::StrCat(field, ".", name == names.end() ? key : name->second);
    ASSIGN_OR_RETURN(value, ConfinePath(root, value, PathUse::kReadFile, what));
  }
  return absl::OkStatus();
}

absl::StatusOr<Data> BuildData(const Runtime& rt, const JobSpec& spec,
                               const std::string& data_root) {
  const DataSpec& d = spec.data();
  absl::StatusOr<std::string> iter_name = io::DataIterForKind(d.kind());
  if (!iter_name.ok()) {
    return FieldError(iter_name.status().code(), "data.kind", iter_name.status().message());
  }
  // What the job gives each iterator: kind mnist names its IDX files in fields of its own,
  // the other kinds give the iterator's arguments.
  io::IterKwargs train(d.train_iter().begin(), d.train_iter().end());
  io::IterKwargs test(d.test_iter().begin(), d.test_iter().end());
  std::string train_field = "data.train_iter", test_field = "data.test_iter";
  std::map<std::string, std::string> train_names, test_names;
  if (d.kind() == "mnist") {  // CheckJobSpec: no iterator arguments
    const std::string flat = d.flat() ? "1" : "0";
    train = {{"image", d.train_images()}, {"label", d.train_labels()}, {"flat", flat}};
    if (!d.test_images().empty()) {
      test = {{"image", d.test_images()}, {"label", d.test_labels()}, {"flat", flat}};
    }
    train_field = test_field = "data";
    train_names = {{"image", "train_images"}, {"label", "train_labels"}};
    test_names = {{"image", "test_images"}, {"label", "test_labels"}};
  }
  RETURN_IF_ERROR(ConfineFiles(data_root, train_field, train_names, train));
  RETURN_IF_ERROR(ConfineFiles(data_root, test_field, test_names, test));
  Data data;
  ASSIGN_OR_RETURN(data.train, BuildIter(rt, spec, *iter_name, train_field, train, false));
  if (!test.empty()) {
    ASSIGN_OR_RETURN(data.test, BuildIter(rt, spec, *iter_name, test_field, test, true));
  }
  return data;
}

// What binding `net` to `train`'s batches would allocate at the least - every argument with
// its gradient, every auxiliary state and output, once per device - against `limit`, before
// any of it is allocated: RESOURCE_EXHAUSTED naming the largest array when it cannot fit.
// Shapes that do not infer are left to Bind, which names the node.
absl::Status CheckFitsInMemory(const graph::Symbol& net, const io::DataIter& train, int devices,
                               uint64_t limit) {
  std::map<std::string, Shape> known;
  std::map<std::string, DType> known_types;
  for (const std::vector<io::DataDesc>& descs : {train.provide_data(), train.provide_label()}) {
    for (const io::DataDesc& d : descs) {
      known[d.name] = d.shape;
      known_types[d.name] = d.dtype;
    }
  }
  absl::StatusOr<graph::InferResult<Shape>> shapes = net.InferShape(known);
  absl::StatusOr<graph::InferResult<DType>> types = net.InferType(known_types);
  if (!shapes.ok() || !types.ok()) return absl::OkStatus();
  struct Array {
    std::string what;
    Shape shape;
    DType dtype;
    int copies;
  };
  std::vector<Array> arrays;
  auto add = [&](const char* kind, const std::vector<std::string>& names,
                 const std::vector<Shape>& s, const std::vector<DType>& t, int copies) {
    for (size_t i = 0; i < names.size() && i < s.size(); ++i) {
      const DType dtype = i < t.size() && t[i] != DType::kUnknown ? t[i] : DType::kFloat32;
      arrays.push_back({absl::StrCat(kind, " '", names[i], "'"), s[i], dtype, copies});
    }
  };
  add("argument", net.ListArguments(), shapes->arguments, types->arguments, 2);
  add("auxiliary state", net.ListAuxiliaryStates(), shapes->aux_states, types->aux_states, 1);
  add("output", net.ListOutputs(), shapes->outputs, types->outputs, 1);
  // Saturating arithmetic: an absurd shape must not wrap around to a small size.
  auto times = [](uint64_t a, uint64_t b) {
    uint64_t product = 0;
    return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
  };
  auto plus = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  uint64_t total = 0, largest_bytes = 0;
  const Array* largest = nullptr;
  for (const Array& a : arrays) {
    uint64_t bytes = DTypeSize(a.dtype);
    for (int64_t d : a.shape.dims())
      bytes = times(bytes, static_cast<uint64_t>(std::max<int64_t>(d, 0)));
    if (largest == nullptr || bytes > largest_bytes) {
      largest = &a;
      largest_bytes = bytes;
    }
    total = plus(total, times(bytes, a.copies));
  }
  total = times(total, static_cast<uint64_t>(devices));
  if (total <= limit) return absl::OkStatus();
  return FieldError(
      absl::StatusCode::kResourceExhausted, "network",
      absl::StrCat("binding it to batches of ", train.batch_size(), " on ", devices,
                   " device(s) needs at least ", total,
                   " bytes for its arguments (with their gradients), auxiliary states and outputs;"
                   " this worker may use ",
                   limit, " (its largest array: ", largest->what, " ", DTypeName(largest->dtype),
                   " ", largest->shape.ToString(), ", ", largest_bytes, " bytes)"));
}

// Where the complete checkpoints of a job with `checkpoint_prefix` go.
std::string CheckpointDir(const std::string& checkpoint_prefix) {
  return checkpoint_prefix + "-checkpoints";
}

// The checkpoint `spec.resume` names ("latest" or a folder under the run root), read whole,
// and checked to be this job's: its name and worker count (the network is checked when its
// parameters are set). Errors name the field and the checkpoint.
absl::StatusOr<train::LoadedCheckpoint> ReadResumeCheckpoint(const Runtime& rt, const JobSpec& spec,
                                                             const std::string& checkpoint_prefix,
                                                             const JobEnvironment& environment) {
  std::string path;
  if (spec.resume() == "latest" || spec.resume() == "auto") {
    if (checkpoint_prefix.empty()) {
      return FieldError(absl::StatusCode::kInvalidArgument, "resume",
                        absl::StrCat("'", spec.resume(),
                                     "' needs the job's checkpoints (checkpoint_prefix is empty)"));
    }
    absl::StatusOr<std::string> newest = train::NewestCheckpoint(CheckpointDir(checkpoint_prefix));
    if (!newest.ok()) return FieldError(newest.status().code(), "resume", newest.status().message());
    path = *newest;
  } else {
    path = spec.resume();
    if (!environment.run_root.empty()) {
      ASSIGN_OR_RETURN(path, ConfinePath(environment.run_root, path, PathUse::kReadFolder, "resume"));
    }
  }
  absl::StatusOr<train::LoadedCheckpoint> loaded = train::ReadCheckpoint(rt, path);
  if (!loaded.ok()) return FieldError(loaded.status().code(), "resume", loaded.status().message());
  const CheckpointManifest& manifest = loaded->manifest;
  if (manifest.job_name() != spec.name()) {
    return FieldError(absl::StatusCode::kInvalidArgument, "resume",
                      absl::StrCat(path, " is a checkpoint of job '", manifest.job_name(),
                                   "', not of '", spec.name(), "'"));
  }
  const int workers = std::max(1, spec.num_workers());
  if (manifest.num_workers() != workers) {
    return FieldError(absl::StatusCode::kInvalidArgument, "resume",
                      absl::StrCat(path, " was taken with ", manifest.num_workers(),
                                   " workers; this job has ", workers,
                                   " (its data partitions and positions would differ)"));
  }
  return loaded;
}

std::map<std::string, double> ToMap(const std::vector<std::pair<std::string, double>>& values) {
  return {values.begin(), values.end()};
}

}  // namespace

absl::StatusOr<JobEnvironment> DaemonJobEnvironment(const rpc::TransportSecurity& security,
                                                    const std::string& data_root,
                                                    const std::string& run_root) {
  const auto root = [](const std::string& given, const char* variable,
                       const char* flag) -> absl::StatusOr<std::string> {
    std::string folder = given;
    if (folder.empty()) {
      const char* value = std::getenv(variable);
      folder =
          value != nullptr && *value != '\0' ? value : std::filesystem::current_path().string();
    }
    std::error_code error;
    if (!std::filesystem::is_directory(folder, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", folder, "' (or ", variable, ") is not a folder"));
    }
    return folder;
  };
  JobEnvironment environment{.security = security};
  ASSIGN_OR_RETURN(environment.data_root, root(data_root, "TESSERA_DATA_ROOT", "--data_root"));
  ASSIGN_OR_RETURN(environment.run_root, root(run_root, "TESSERA_RUN_ROOT", "--run_root"));
  return environment;
}

absl::StatusOr<JobResult> RunJob(const Runtime& rt, const JobSpec& spec, const JobCallbacks& callbacks,
                                 Cancellation* cancellation, const JobEnvironment& environment) {
  RETURN_IF_ERROR(jobs::CheckJobSpec(spec));
  const std::string kvstore = spec.kvstore().empty() ? "local" : spec.kvstore();
  absl::StatusOr<kvstore::KVStoreKind> kind = kvstore::ParseKVStoreType(kvstore);
  if (!kind.ok()) return FieldError(kind.status().code(), "kvstore", kind.status().message());
  const bool dist = kind->dist;
  if (dist && spec.ps_hosts().empty()) {
    return FieldError(absl::StatusCode::kFailedPrecondition, "kvstore",
                      absl::StrCat("'", kvstore, "' needs parameter servers (ps_hosts is empty)"));
  }
  // Checked before the cluster's placeholder entries are allocated from them.
  if (spec.num_workers() < 0 || spec.num_workers() > kvstore::kMaxClusterProcesses) {
    return FieldError(absl::StatusCode::kInvalidArgument, "num_workers",
                      absl::StrCat(spec.num_workers(), " is outside [0, ",
                                   kvstore::kMaxClusterProcesses, "] (0: one worker)"));
  }
  if (spec.ps_hosts_size() > kvstore::kMaxClusterProcesses) {
    return FieldError(absl::StatusCode::kInvalidArgument, "ps_hosts",
                      absl::StrCat(spec.ps_hosts_size(), " servers; at most ",
                                   kvstore::kMaxClusterProcesses));
  }
  const int workers = std::max(1, spec.num_workers());
  if (spec.rank() < 0 || spec.rank() >= workers) {
    return FieldError(absl::StatusCode::kInvalidArgument, "rank",
                      absl::StrCat(spec.rank(), " is not a worker of ", workers));
  }
  ASSIGN_OR_RETURN(graph::Symbol net, BuildNetwork(spec));
  std::vector<Context> contexts;
  for (const std::string& device : spec.devices()) {
    absl::StatusOr<Context> ctx = Context::Parse(device);
    if (!ctx.ok()) return FieldError(absl::StatusCode::kInvalidArgument, "devices", ctx.status().message());
    contexts.push_back(*ctx);
  }
  if (contexts.empty()) contexts.push_back(Context::CPU());
  absl::StatusOr<std::shared_ptr<const train::Initializer>> initializer =
      train::CreateInitializer(spec.initializer());
  if (!initializer.ok()) {
    return FieldError(initializer.status().code(), "initializer", initializer.status().message());
  }
  std::string checkpoint_prefix = spec.checkpoint_prefix();
  if (!checkpoint_prefix.empty() && !environment.run_root.empty()) {
    ASSIGN_OR_RETURN(checkpoint_prefix, ConfinePath(environment.run_root, checkpoint_prefix,
                                                    PathUse::kWritePrefix, "checkpoint_prefix"));
  }
  ASSIGN_OR_RETURN(Data data, BuildData(rt, spec, environment.data_root));
  RETURN_IF_ERROR(CheckFitsInMemory(net, *data.train, static_cast<int>(contexts.size()),
                                    environment.memory_limit_bytes > 0
                                        ? environment.memory_limit_bytes
                                        : AvailableMemoryBytes()));

  absl::StatusOr<std::optional<graph::AmpOptions>> amp = jobs::AmpOptionsOf(spec);
  if (!amp.ok()) return amp.status();
  train::Module module(
      rt, net,
      {.contexts = contexts,
       .fixed_param_names = {spec.fixed_param_names().begin(), spec.fixed_param_names().end()},
       .check_finite = spec.check_finite(),
       .amp = *amp});
  if (absl::Status bound = module.Bind(data.train->provide_data(), data.train->provide_label(), true);
      !bound.ok()) {
    return InNetwork(bound);
  }
  if (spec.has_initial_params()) {
    const InitialParams& initial = spec.initial_params();
    std::string path = initial.path();
    if (!environment.data_root.empty()) {
      ASSIGN_OR_RETURN(path, ConfinePath(environment.data_root, path, PathUse::kReadFile,
                                         "initial_params.path"));
    }
    if (absl::Status loaded = module.LoadParams(path, {.allow_missing = initial.allow_missing(),
                                                       .allow_extra = initial.allow_extra(),
                                                       .initializer = *initializer,
                                                       .seed = spec.seed()});
        !loaded.ok()) {
      return FieldError(loaded.code(), "initial_params", loaded.message());
    }
  }
  // A resumed job: its checkpoint, whole and of this job, before anything is trained. Only
  // the first worker reads it: the others start from the servers' parameters, at the first
  // worker's position (Module::Fit), so their run folders need not be the first's.
  std::optional<train::LoadedCheckpoint> resume;
  // A replacement of a lost worker continues from where the servers say it was lost.
  bool from_start = spec.rank() != 0 || spec.rejoin();
  if (spec.resume() == "auto" && !from_start) {
    // After a lost process: the newest checkpoint if the lost run wrote one.
    from_start = checkpoint_prefix.empty() ||
                 absl::IsNotFound(train::NewestCheckpoint(CheckpointDir(checkpoint_prefix)).status());
  }
  if (!spec.resume().empty() && !from_start) {
    ASSIGN_OR_RETURN(resume, ReadResumeCheckpoint(rt, spec, checkpoint_prefix, environment));
    if (absl::Status set = module.SetParams(resume->arg_params, resume->aux_params, {});
        !set.ok()) {
      return FieldError(set.code(), "resume",
                        absl::StrCat(resume->path, " is a checkpoint of another network: ",
                                     set.message()));
    }
  }
  absl::StatusOr<ParamsFormat> checkpoint_format =
      ParseParamsFormat(spec.checkpoint_format().empty() ? "tessera" : spec.checkpoint_format());
  if (!checkpoint_format.ok()) {
    return FieldError(absl::StatusCode::kInvalidArgument, "checkpoint_format",
                      checkpoint_format.status().message());
  }

  train::FitOptions fit;
  fit.num_epoch = spec.num_epochs();
  if (!spec.eval_metric().empty()) fit.eval_metric = spec.eval_metric();
  fit.kvstore = kvstore;
  if (!spec.optimizer().empty()) fit.optimizer = spec.optimizer();
  if (!spec.optimizer_params().empty()) {
    fit.optimizer_params.assign(spec.optimizer_params().begin(), spec.optimizer_params().end());
    std::sort(fit.optimizer_params.begin(), fit.optimizer_params.end());  // a map has no order
  }
  if (!spec.lr_scheduler().empty()) {
    std::vector<std::pair<std::string, std::string>> args(spec.lr_scheduler_params().begin(),
                                                          spec.lr_scheduler_params().end());
    std::sort(args.begin(), args.end());  // a map has no order
    fit.lr_scheduler = [name = spec.lr_scheduler(), args] {
      return kvstore::CreateLRScheduler(name, args);
    };
  }
  fit.initializer = *initializer;
  fit.seed = spec.seed();
  if (spec.rank() == 0 && !checkpoint_prefix.empty()) {
    fit.checkpoint_prefix = checkpoint_prefix;
    fit.checkpoint_dir = CheckpointDir(checkpoint_prefix);
    std::error_code error;
    if (spec.resume().empty() && !spec.rejoin() &&
        std::filesystem::exists(fit.checkpoint_dir, error)) {
      // A fresh run of the job: an earlier run's checkpoints move aside (one generation is
      // kept), so that a recovery of this run ("auto") never resumes from them.
      const std::string previous = fit.checkpoint_dir + ".previous";
      std::filesystem::remove_all(previous, error);
      std::filesystem::rename(fit.checkpoint_dir, previous, error);
      if (error) {
        return FieldError(absl::StatusCode::kPermissionDenied, "checkpoint_prefix",
                          absl::StrCat("cannot move an earlier run's checkpoints aside to ",
                                       previous, ": ", error.message()));
      }
      spdlog::info("job '{}': an earlier run's checkpoints moved to {}", spec.name(), previous);
    }
    // Made now: a run folder it cannot write fails the job before it trains.
    std::filesystem::create_directories(fit.checkpoint_dir, error);
    if (error) {
      return FieldError(absl::StatusCode::kPermissionDenied, "checkpoint_prefix",
                        absl::StrCat("cannot make ", fit.checkpoint_dir, ": ", error.message()));
    }
    fit.checkpoint_policy = {.every_batches = spec.checkpoint().every_batches(),
                             .every_seconds = spec.checkpoint().every_seconds(),
                             .keep = spec.checkpoint().keep() > 0 ? spec.checkpoint().keep() : 3};
    fit.checkpoint_job_name = spec.name();
    fit.checkpoint_job = spec.SerializeAsString();
    fit.checkpoint_num_workers = workers;
  }
  fit.checkpoint_format = *checkpoint_format;
  if (resume.has_value()) fit.resume = &*resume;
  fit.should_stop = [cancellation] { return cancellation != nullptr && cancellation->cancelled(); };
  if (dist) {
    kvstore::DistKVStoreOptions options;
    options.cluster.role = kvstore::Role::kWorker;
    options.cluster.index = spec.rank();
    options.cluster.servers.assign(spec.ps_hosts().begin(), spec.ps_hosts().end());
    options.cluster.workers.assign(workers, "");
    options.job_id = spec.job_id().empty() ? spec.name() : spec.job_id();
    options.security = environment.security;
    options.cancellation = cancellation;
    options.replace_workers = jobs::RecoveryPolicyOf(spec).replace_workers;
    options.rejoin = spec.rejoin();
    options.compression = spec.compression();
    fit.kvstore_factory = [options](const std::string& type) { return kvstore::CreateDistKVStore(type, options); };
  }

  auto emit = [&callbacks](const JobEvent& event) {
    if (callbacks.events) callbacks.events(event);
  };
  // Throughput per batch event and per epoch, from this worker's own samples.
  Clock::time_point epoch_start = Clock::now(), window_start = epoch_start;
  int window_batches = 0, epoch_batches = 0;
  const int every = spec.batch_event_every();
  WorkerMetrics& metrics = TrainingMetrics();
  fit.batch_end_callback = [&](const train::BatchEndParam& p) {
    ++window_batches;
    ++epoch_batches;
    metrics.batches.Increment();
    metrics.samples.Increment(spec.batch_size());
    if (callbacks.progress) callbacks.progress(p.epoch, p.nbatch);
    if (every <= 0 || p.nbatch % every != 0) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
    const double samples_per_second =
        seconds > 0 ? window_batches * spec.batch_size() / seconds : 0;
    metrics.samples_per_second.Set(samples_per_second);
    JobEvent event;
    JobEvent::Batch* batch = event.mutable_batch();
    batch->set_epoch(p.epoch);
    batch->set_batch(p.nbatch);
    batch->set_samples_per_second(samples_per_second);
    for (const auto& [name, value] : p.metric->Get()) (*batch->mutable_metrics())[name] = value;
    emit(event);
    window_start = Clock::now();
    window_batches = 0;
  };
  std::map<std::string, double> last_eval;
  fit.epoch_end_callback = [&](int epoch, const std::vector<std::pair<std::string, double>>& train,
                               const std::vector<std::pair<std::string, double>>& eval) {
    const double seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    JobEvent event;
    JobEvent::Epoch* e = event.mutable_epoch();
    e->set_epoch(epoch);
    for (const auto& [name, value] : train) (*e->mutable_train())[name] = value;
    for (const auto& [name, value] : eval) (*e->mutable_eval())[name] = value;
    e->set_seconds(seconds);
    e->set_samples_per_second(seconds > 0 ? epoch_batches * spec.batch_size() / seconds : 0);
    if (every <= 0) metrics.samples_per_second.Set(e->samples_per_second());
    emit(event);
    epoch_batches = 0;
    last_eval = ToMap(eval);
    epoch_start = window_start = Clock::now();
    window_batches = 0;
    return absl::OkStatus();
  };

  const Clock::time_point start = Clock::now();
  {
    JobEvent event;
    JobEvent::Started* started = event.mutable_started();
    started->set_rank(spec.rank());
    const std::map<std::string, NDArray> args = module.executors().front()->arg_dict();
    int64_t parameters = 0;
    for (const std::string& name : module.param_names()) {
      if (auto it = args.find(name); it != args.end()) parameters += it->second.Size();
    }
    started->set_parameters(parameters);
    started->set_batches_per_epoch(std::max<int64_t>(0, data.train->num_batches()));
    if (resume.has_value()) {
      started->set_resumed_from(resume->path);
      started->set_resume_epoch(resume->manifest.epoch());
      started->set_resume_batch(resume->manifest.batch());
    }
    emit(event);
  }
  // A resumed job reports the epochs its checkpoint had finished first, so that its
  // followers (metrics.csv, the plot) hold every epoch once.
  if (resume.has_value()) {
    for (const CheckpointManifest::EpochMetrics& finished : resume->manifest.history()) {
      JobEvent event;
      JobEvent::Epoch* e = event.mutable_epoch();
      e->set_epoch(finished.epoch());
      e->mutable_train()->insert(finished.train().begin(), finished.train().end());
      e->mutable_eval()->insert(finished.eval().begin(), finished.eval().end());
      last_eval = {finished.eval().begin(), finished.eval().end()};
      emit(event);
    }
  }
  RETURN_IF_ERROR(module.Fit(data.train.get(), data.test.get(), fit));

  JobResult result;
  ASSIGN_OR_RETURN(result.arg_params, module.GetArgParams());
  ASSIGN_OR_RETURN(result.aux_params, module.GetAuxParams());
  result.eval = last_eval;
  JobEvent event;
  for (const auto& [name, value] : last_eval) (*event.mutable_finished()->mutable_eval())[name] = value;
  // After the last epoch's barrier every worker's pushes are applied: what the servers counted.
  if (dist && spec.rank() == 0 && module.kvstore() != nullptr) {
    absl::StatusOr<std::vector<KeyCounters>> counters = module.kvstore()->RoundCounters();
    if (counters.ok()) {
      event.mutable_finished()->mutable_round_counters()->Add(counters->begin(), counters->end());
    } else {
      spdlog::warn("job '{}': the servers' round counters: {}", spec.name(),
                   counters.status().ToString());
    }
  }
  event.mutable_finished()->set_seconds(std::chrono::duration<double>(Clock::now() - start).count());
  emit(event);
  return result;
}

}  // namespace tessera::worker
