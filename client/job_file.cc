#include "client/job_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/context.h"
#include "core/status_macros.h"
#include "examples/models.h"
#include "io/create_data_iter.h"
#include "jobs/iterator_rules.h"
#include "jobs/job_spec_check.h"
#include "kvstore/kvstore.h"
#include "kvstore/lr_scheduler.h"
#include "kvstore/optimizer.h"
#include "ndarray/params_file.h"
#include "train/initializer.h"
#include "train/metric.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

// The KVStore types a job may name (kvstore/kvstore.h).


// The IDX-file fields of kind mnist; the other kinds read data.train / data.test instead.
constexpr const char* kMnistFields[] = {"dir",         "train_images", "train_labels",
                                        "test_images", "test_labels",  "flat"};

// The names tools/fetch_mnist.py writes (the standard MNIST distribution's).
constexpr const char* kTrainImages = "train-images-idx3-ubyte";
constexpr const char* kTrainLabels = "train-labels-idx1-ubyte";
constexpr const char* kTestImages = "t10k-images-idx3-ubyte";
constexpr const char* kTestLabels = "t10k-labels-idx1-ubyte";

template <size_t N>
bool OneOf(const std::string& value, const char* const (&names)[N]) {
  return std::find(std::begin(names), std::end(names), value) != std::end(names);
}

template <size_t N>
std::string Names(const char* const (&names)[N]) {
  return absl::StrJoin(std::begin(names), std::end(names), ", ");
}

// Levenshtein distance, for "did you mean" on unknown keys.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  return absl::StrCat("\"", node.Scalar(), "\"");
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

bool ValidName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// "lenet" for ".../lenet.yaml"; invalid characters become '-'.
std::string DefaultName(const std::string& file) {
  std::string stem = fs::path(file).filename().string();
  for (const char* ext : {".yaml", ".yml"}) {
    if (stem.size() > std::strlen(ext) && stem.ends_with(ext))
      stem.resize(stem.size() - std::strlen(ext));
  }
  for (char& c : stem) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '-';
  }
  return ValidName(stem) ? stem : "job";
}

// One map's entries by key, with the key's node for error positions.
struct Entry {
  YAML::Node key, value;
};
using Entries = std::map<std::string, Entry>;

class Parser {
 public:
  Parser(std::string file, std::string base_dir, ClusterOverride cluster)
      : file_(std::move(file)), base_dir_(std::move(base_dir)), cluster_(cluster) {}

  absl::StatusOr<JobFile> Parse(const std::string& text) {
    // yaml-cpp reports by exception; none leaves this function.
    try {
      return ParseDocument(YAML::Load(text));
    } catch (const YAML::Exception& e) {
      if (e.mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(file_, ": ", e.msg));
      return absl::InvalidArgumentError(
          absl::StrCat(file_, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(file_, ": ", e.what()));
    }
  }

 private:
  absl::Status Error(const YAML::Node& at, const std::string& path, absl::string_view what,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) const {
    std::string where = file_;
    if (at.IsDefined() && !at.Mark().is_null()) absl::StrAppend(&where, ":", at.Mark().line + 1);
    return absl::Status(code, path.empty() ? absl::StrCat(where, ": ", what)
                                           : absl::StrCat(where, ": ", path, ": ", what));
  }
  absl::Status Error(const Entry& e, const std::string& path, absl::string_view what,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) const {
    return Error(e.key, path, what, code);
  }
  absl::Status Required(const std::string& path) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", path, ": required"));
  }

  // The entries of the map `node` at `path`; unknown and duplicate keys are errors. A null
  // node (a key with nothing after it) reads as an empty map.
  absl::StatusOr<Entries> Map(const YAML::Node& node, const YAML::Node& at, const std::string& path,
                              std::initializer_list<const char*> known) const {
    Entries entries;
    if (node.IsNull()) return entries;
    if (!node.IsMap()) {
      return Error(at, path.empty() ? "the job" : path,
                   absl::StrCat("expected a map, got ", Describe(node)));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: `it->` points into a temporary proxy that dies with the expression.
      const YAML::Node key = it->first, value = it->second;
      if (!key.IsScalar())
        return Error(key, path, absl::StrCat("keys must be names, got ", Describe(key)));
      const std::string name = key.Scalar();
      if (known.size() > 0 && std::find_if(known.begin(), known.end(), [&](const char* k) {
                                return name == k;
                              }) == known.end()) {
        std::string what = "unknown key";
        const char* nearest = nullptr;
        size_t best = 3;  // suggest only within two edits
        for (const char* k : known) {
          if (const size_t d = EditDistance(name, k); d < best) best = d, nearest = k;
        }
        if (nearest != nullptr) absl::StrAppend(&what, " (did you mean '", nearest, "'?)");
        absl::StrAppend(&what, "; known: ", absl::StrJoin(known, ", "));
        return Error(key, Join(path, name), what);
      }
      if (!entries.emplace(name, Entry{key, value}).second) {
        return Error(key, Join(path, name), "given twice");
      }
    }
    return entries;
  }

  absl::StatusOr<std::string> String(const Entry& e, const std::string& path) const {
    if (!e.value.IsScalar())
      return Error(e, path, absl::StrCat("expected a string, got ", Describe(e.value)));
    return e.value.Scalar();
  }

  absl::StatusOr<int> Int(const Entry& e, const std::string& path, int min) const {
    int v = 0;
    if (!e.value.IsScalar() || !absl::SimpleAtoi(e.value.Scalar(), &v)) {
      return Error(e, path, absl::StrCat("expected an integer, got ", Describe(e.value)));
    }
    if (v < min) return Error(e, path, absl::StrCat("must be >= ", min, ", got ", v));
    return v;
  }

  // A duration in seconds, > 0.
  absl::StatusOr<double> Seconds(const Entry& e, const std::string& path) const {
    double v = 0;
    if (!e.value.IsScalar() || !absl::SimpleAtod(e.value.Scalar(), &v) || !(v > 0)) {
      return Error(e, path, absl::StrCat("expected a number of seconds > 0, got ", Describe(e.value)));
    }
    return v;
  }

  absl::StatusOr<bool> Bool(const Entry& e, const std::string& path) const {
    bool v = false;
    // yaml-cpp's reading: true/false, yes/no, on/off, y/n in their usual cases.
    if (!e.value.IsScalar() || !YAML::convert<bool>::decode(e.value, v)) {
      return Error(e, path, absl::StrCat("expected true or false, got ", Describe(e.value)));
    }
    return v;
  }

  // A list of strings, or one string as a list of one.
  absl::StatusOr<std::vector<std::pair<std::string, YAML::Node>>> Strings(
      const Entry& e, const std::string& path) const {
    std::vector<std::pair<std::string, YAML::Node>> out;
    if (e.value.IsScalar()) {
      out.emplace_back(e.value.Scalar(), e.key);
      return out;
    }
    if (!e.value.IsSequence() || e.value.size() == 0) {
      return Error(e, path, absl::StrCat("expected a list of strings, got ", Describe(e.value)));
    }
    for (size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      if (!item.IsScalar()) {
        return Error(item, absl::StrCat(path, "[", i, "]"),
                     absl::StrCat("expected a string, got ", Describe(item)));
      }
      out.emplace_back(item.Scalar(), item);
    }
    return out;
  }

  // A path from the file: relative ones are relative to base_dir.
  absl::StatusOr<std::string> Path(const Entry& e, const std::string& path) const {
    ASSIGN_OR_RETURN(std::string p, String(e, path));
    if (p.empty()) return Error(e, path, "must not be empty");
    return Resolve(p);
  }
  std::string Resolve(const std::string& p) const {
    fs::path resolved(p);
    if (!resolved.is_absolute() && !base_dir_.empty()) resolved = fs::path(base_dir_) / resolved;
    return resolved.lexically_normal().string();
  }

  absl::StatusOr<JobFile> ParseDocument(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_, ": empty job file (network, data, batch_size and epochs are required)"));
    }
    ASSIGN_OR_RETURN(Entries top,
                     Map(root, root, "",
                         {"name", "network", "data", "batch_size", "epochs", "optimizer",
                          "initializer", "eval_metric", "kvstore", "cluster", "devices", "seed",
                          "checkpoint", "checkpoint_format", "run_dir", "recovery", "check_finite",
                          "amp", "compression_params"}));
    JobFile job;
    JobSpec& spec = job.spec;
    spec.set_version(1);

    std::string name = DefaultName(file_);
    if (auto it = top.find("name"); it != top.end()) {
      ASSIGN_OR_RETURN(name, String(it->second, "name"));
      if (!ValidName(name)) {
        return Error(it->second, "name",
                     absl::StrCat("\"", name,
                                  "\" must be letters, digits, '.', '_' or '-' (it names files)"));
      }
    }
    spec.set_name(name);

    for (const char* required : {"network", "data", "batch_size", "epochs"}) {
      if (!top.contains(required)) return Required(required);
    }
    RETURN_IF_ERROR(ParseNetwork(top.at("network"), &spec));
    RETURN_IF_ERROR(ParseData(top.at("data"), spec.mutable_data()));
    ASSIGN_OR_RETURN(const int batch_size, Int(top.at("batch_size"), "batch_size", 1));
    spec.set_batch_size(batch_size);
    ASSIGN_OR_RETURN(const int epochs, Int(top.at("epochs"), "epochs", 1));
    spec.set_num_epochs(epochs);

    if (auto it = top.find("optimizer"); it != top.end()) {
      RETURN_IF_ERROR(ParseOptimizer(it->second, &spec));
    } else {
      spec.set_optimizer("sgd");
      (*spec.mutable_optimizer_params())["learning_rate"] = "0.01";
    }

    spec.set_initializer("xavier");
    if (auto it = top.find("initializer"); it != top.end()) {
      ASSIGN_OR_RETURN(std::string init, String(it->second, "initializer"));
      if (absl::Status known = train::CreateInitializer(init).status(); !known.ok()) {
        return Error(it->second, "initializer", known.message());
      }
      spec.set_initializer(init);
    }

    spec.set_eval_metric("acc");
    if (auto it = top.find("eval_metric"); it != top.end()) {
      ASSIGN_OR_RETURN(auto metrics, Strings(it->second, "eval_metric"));
      std::vector<std::string> names;
      for (const auto& [metric, at] : metrics) names.push_back(metric);
      const std::string joined = absl::StrJoin(names, ",");
      if (absl::StatusOr<std::unique_ptr<train::EvalMetric>> m = train::CreateMetric(joined);
          !m.ok()) {
        return Error(it->second, "eval_metric", m.status().message());
      }
      spec.set_eval_metric(joined);
    }

    Entries cluster;
    if (auto it = top.find("cluster"); it != top.end()) {
      ASSIGN_OR_RETURN(cluster, Map(it->second.value, it->second.key, "cluster",
                                    {"workers", "servers", "replicas"}));
      if (auto w = cluster.find("workers"); w != cluster.end()) {
        ASSIGN_OR_RETURN(job.num_workers, Int(w->second, "cluster.workers", 1));
      }
      if (auto s = cluster.find("servers"); s != cluster.end()) {
        ASSIGN_OR_RETURN(job.num_servers, Int(s->second, "cluster.servers", 0));
      }
    }
    if (cluster_.workers) job.num_workers = *cluster_.workers;
    if (cluster_.servers) job.num_servers = *cluster_.servers;
    job.replicas = job.num_servers >= 2 ? 2 : 1;
    if (auto r = cluster.find("replicas"); r != cluster.end()) {
      ASSIGN_OR_RETURN(job.replicas, Int(r->second, "cluster.replicas", 1));
      if (job.replicas > 2 || (job.replicas == 2 && job.num_servers < 2)) {
        return Error(r->second, "cluster.replicas",
                     absl::StrCat("must be 1, or 2 with at least 2 servers (this cluster has ",
                                  job.num_servers,
                                  "): each server's keys are copied to the next server"));
      }
    }

    spec.set_kvstore(job.num_workers > 1 ? "dist_sync" : "local");
    if (auto it = top.find("kvstore"); it != top.end()) {
      ASSIGN_OR_RETURN(std::string kv, String(it->second, "kvstore"));
      if (absl::Status known = kvstore::ParseKVStoreType(kv).status(); !known.ok()) {
        return Error(it->second, "kvstore", known.message());
      }
      if (IsLocalKVStore(kv) && job.num_workers > 1) {
        return Error(
            it->second, "kvstore",
            absl::StrCat("\"", kv, "\" would train each of the ", job.num_workers,
                         " workers alone: use dist_sync or dist_async, or cluster.workers: 1"));
      }
      spec.set_kvstore(kv);
    }
    if (!IsLocalKVStore(spec.kvstore()) && job.num_servers < 1) {
      // Only an explicit servers: 0 gets here, so "cluster" is in the file (a launcher's
      // override asks for at least one).
      return Error(top.at("cluster"), "cluster.servers",
                   absl::StrCat("kvstore ", spec.kvstore(), " needs at least 1 server"));
    }

    if (auto it = top.find("devices"); it != top.end()) {
      ASSIGN_OR_RETURN(auto devices, Strings(it->second, "devices"));
      for (size_t i = 0; i < devices.size(); ++i) {
        const auto& [device, at] = devices[i];
        if (absl::StatusOr<Context> ctx =
                Context::Parse(absl::string_view(device.data(), device.size()));
            !ctx.ok()) {
          return Error(at, absl::StrCat("devices[", i, "]"), ctx.status().message());
        }
        spec.add_devices(device);
      }
    } else {
      spec.add_devices("cpu(0)");
    }

    if (auto it = top.find("seed"); it != top.end()) {
      const Entry& e = it->second;
      uint64_t seed = 0;
      if (!e.value.IsScalar() || !absl::SimpleAtoi(e.value.Scalar(), &seed)) {
        return Error(e, "seed", absl::StrCat("expected an integer >= 0, got ", Describe(e.value)));
      }
      spec.set_seed(seed);
    }

    job.run_dir = absl::StrCat("runs/", name);
    if (auto it = top.find("run_dir"); it != top.end()) {
      ASSIGN_OR_RETURN(job.run_dir, String(it->second, "run_dir"));
      if (job.run_dir.empty()) return Error(it->second, "run_dir", "must not be empty");
    }

    bool checkpoint = true;
    if (auto it = top.find("checkpoint"); it != top.end()) {
      if (it->second.value.IsMap()) {
        RETURN_IF_ERROR(ParseCheckpointPolicy(it->second, spec.mutable_checkpoint()));
        spec.set_version(std::max<uint32_t>(spec.version(), 3));
      } else {
        ASSIGN_OR_RETURN(checkpoint, Bool(it->second, "checkpoint"));
      }
    }
    if (checkpoint) spec.set_checkpoint_prefix((fs::path(job.run_dir) / name).string());
    if (auto it = top.find("recovery"); it != top.end()) {
      RETURN_IF_ERROR(ParseRecoveryPolicy(it->second, spec.mutable_recovery()));
    }
    if (auto it = top.find("check_finite"); it != top.end()) {
      ASSIGN_OR_RETURN(const bool check, Bool(it->second, "check_finite"));
      spec.set_check_finite(check);
      if (check) spec.set_version(std::max<uint32_t>(spec.version(), 4));
    }
    if (auto it = top.find("amp"); it != top.end()) {
      RETURN_IF_ERROR(ParseAmpPolicy(it->second, spec.mutable_amp()));
      spec.set_version(std::max<uint32_t>(spec.version(), 5));
    }
    if (auto it = top.find("compression_params"); it != top.end()) {
      RETURN_IF_ERROR(ParseCompression(it->second, spec.mutable_compression()));
      spec.set_version(std::max<uint32_t>(spec.version(), 6));
    }
    if (auto it = top.find("checkpoint_format"); it != top.end()) {
      ASSIGN_OR_RETURN(std::string format, String(it->second, "checkpoint_format"));
      if (absl::Status known = ParseParamsFormat(format).status(); !known.ok()) {
        return Error(it->second, "checkpoint_format", known.message());
      }
      spec.set_checkpoint_format(format);
      spec.set_version(std::max<uint32_t>(spec.version(), 2));
    }
    return job;
  }

  // checkpoint: {every_batches: N, every_seconds: T, keep: K}, each optional.
  absl::Status ParseCheckpointPolicy(const Entry& e, CheckpointPolicy* policy) const {
    ASSIGN_OR_RETURN(Entries entries, Map(e.value, e.key, "checkpoint",
                                          {"every_batches", "every_seconds", "keep"}));
    if (auto it = entries.find("every_batches"); it != entries.end()) {
      ASSIGN_OR_RETURN(const int n, Int(it->second, "checkpoint.every_batches", 1));
      policy->set_every_batches(n);
    }
    if (auto it = entries.find("every_seconds"); it != entries.end()) {
      ASSIGN_OR_RETURN(const double seconds, Seconds(it->second, "checkpoint.every_seconds"));
      policy->set_every_seconds(seconds);
    }
    if (auto it = entries.find("keep"); it != entries.end()) {
      ASSIGN_OR_RETURN(const int keep, Int(it->second, "checkpoint.keep", 1));
      policy->set_keep(keep);
    }
    return absl::OkStatus();
  }

  // recovery: {max_restarts: N, wait_seconds: T, replace_workers: B}, each optional
  // (jobs/recovery_policy.h).
  // amp: {dtype: bfloat16 | float16, loss_scale: N}, or just the dtype (amp: bfloat16).
  absl::Status ParseAmpPolicy(const Entry& e, AmpPolicy* amp) const {
    if (e.value.IsScalar()) {
      ASSIGN_OR_RETURN(std::string dtype, String(e, "amp"));
      amp->set_dtype(dtype);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Entries entries, Map(e.value, e.key, "amp", {"dtype", "loss_scale"}));
    auto dtype = entries.find("dtype");
    if (dtype == entries.end()) return Error(e, "amp", "needs a dtype (bfloat16 or float16)");
    ASSIGN_OR_RETURN(std::string type, String(dtype->second, "amp.dtype"));
    amp->set_dtype(type);
    if (auto it = entries.find("loss_scale"); it != entries.end()) {
      ASSIGN_OR_RETURN(std::string scale, String(it->second, "amp.loss_scale"));
      amp->set_loss_scale(scale);
    }
    return absl::OkStatus();
  }

  // compression_params: {type: 2bit, threshold: T} (MXNet's kvstore compression_params; the
  // threshold defaults to MXNet's 0.5) or {type: fp16}, and/or pull_type: bf16 (the pulls).
  // CheckJobSpec checks the values.
  absl::Status ParseCompression(const Entry& e, GradientCompression* compression) const {
    ASSIGN_OR_RETURN(Entries entries,
                     Map(e.value, e.key, "compression_params", {"type", "threshold", "pull_type"}));
    auto type = entries.find("type");
    auto pull_type = entries.find("pull_type");
    if (type == entries.end() && pull_type == entries.end()) {
      return Error(e, "compression_params", "needs a type (2bit, fp16) or a pull_type (bf16)");
    }
    if (pull_type != entries.end()) {
      ASSIGN_OR_RETURN(std::string name, String(pull_type->second, "compression_params.pull_type"));
      compression->set_pull_type(name);
    }
    std::string name;
    if (type != entries.end()) {
      ASSIGN_OR_RETURN(name, String(type->second, "compression_params.type"));
    }
    compression->set_type(name);
    if (name == "2bit") compression->set_threshold(0.5f);
    if (auto it = entries.find("threshold"); it != entries.end()) {
      double threshold = 0;
      if (!it->second.value.IsScalar() || !absl::SimpleAtod(it->second.value.Scalar(), &threshold)) {
        return Error(it->second, "compression_params.threshold",
                     absl::StrCat("expected a number, got ", Describe(it->second.value)));
      }
      compression->set_threshold(static_cast<float>(threshold));
    }
    return absl::OkStatus();
  }

  absl::Status ParseRecoveryPolicy(const Entry& e, RecoveryPolicy* policy) const {
    ASSIGN_OR_RETURN(Entries entries, Map(e.value, e.key, "recovery",
                                          {"max_restarts", "wait_seconds", "replace_workers"}));
    if (auto it = entries.find("replace_workers"); it != entries.end()) {
      ASSIGN_OR_RETURN(const bool replace, Bool(it->second, "recovery.replace_workers"));
      policy->set_replace_workers(replace);
    }
    if (auto it = entries.find("max_restarts"); it != entries.end()) {
      ASSIGN_OR_RETURN(const int n, Int(it->second, "recovery.max_restarts", 0));
      policy->set_max_restarts(n == 0 ? -1 : n);  // the spec's 0 is "the default"
    }
    if (auto it = entries.find("wait_seconds"); it != entries.end()) {
      ASSIGN_OR_RETURN(const double seconds, Seconds(it->second, "recovery.wait_seconds"));
      policy->set_wait_seconds(seconds);
    }
    return absl::OkStatus();
  }

  absl::Status ParseNetwork(const Entry& e, JobSpec* spec) const {
    ASSIGN_OR_RETURN(Entries network, Map(e.value, e.key, "network",
                                          {"model", "symbol_file", "params", "allow_missing",
                                           "allow_extra", "fixed_param_names"}));
    RETURN_IF_ERROR(ParseFineTuning(network, spec));
    const bool model = network.contains("model"), symbol = network.contains("symbol_file");
    if (model == symbol) {
      return Error(e, "network",
                   model ? "give one of model and symbol_file, not both"
                         : absl::StrCat("one of model (",
                                        absl::StrJoin(examples::BuiltinModelNames(), ", "),
                                        ") or symbol_file is required"));
    }
    if (model) {
      const Entry& m = network.at("model");
      ASSIGN_OR_RETURN(std::string name, String(m, "network.model"));
      const std::vector<std::string> models = examples::BuiltinModelNames();
      if (std::find(models.begin(), models.end(), name) == models.end()) {
        return Error(m, "network.model",
                     absl::StrCat("unknown built-in model '", name, "' (", absl::StrJoin(models, ", "), ")"));
      }
      spec->set_model(name);
      return absl::OkStatus();
    }
    const Entry& s = network.at("symbol_file");
    ASSIGN_OR_RETURN(std::string path, Path(s, "network.symbol_file"));
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return Error(s, "network.symbol_file",
                   absl::StrCat("cannot read '", path, "': ", std::strerror(errno)),
                   absl::StatusCode::kNotFound);
    }
    std::ostringstream text;
    text << in.rdbuf();
    spec->set_symbol_json(text.str());
    return absl::OkStatus();
  }

  // network.params, allow_missing, allow_extra and fixed_param_names: what a job that
  // starts from trained parameters (fine-tuning) adds; JobSpec version 2.
  absl::Status ParseFineTuning(const Entries& network, JobSpec* spec) const {
    if (auto it = network.find("params"); it != network.end()) {
      ASSIGN_OR_RETURN(std::string path, Path(it->second, "network.params"));
      spec->mutable_initial_params()->set_path(path);
    }
    for (const char* flag : {"allow_missing", "allow_extra"}) {
      auto it = network.find(flag);
      if (it == network.end()) continue;
      const std::string field = absl::StrCat("network.", flag);
      if (!spec->has_initial_params()) return Error(it->second, field, "needs network.params");
      ASSIGN_OR_RETURN(const bool value, Bool(it->second, field));
      InitialParams* initial = spec->mutable_initial_params();
      std::string(flag) == "allow_missing" ? initial->set_allow_missing(value)
                                           : initial->set_allow_extra(value);
    }
    if (auto it = network.find("fixed_param_names"); it != network.end()) {
      ASSIGN_OR_RETURN(auto names, Strings(it->second, "network.fixed_param_names"));
      for (auto& [name, node] : names) spec->add_fixed_param_names(name);
    }
    if (spec->has_initial_params() || spec->fixed_param_names_size() > 0) spec->set_version(std::max<uint32_t>(spec->version(), 2));
    return absl::OkStatus();
  }

  absl::Status ParseData(const Entry& e, DataSpec* data) const {
    ASSIGN_OR_RETURN(Entries d, Map(e.value, e.key, "data",
                                    {"kind", "dir", "train_images", "train_labels", "test_images",
                                     "test_labels", "flat", "shuffle", "train", "test"}));
    data->set_kind("mnist");
    if (auto it = d.find("kind"); it != d.end()) {
      ASSIGN_OR_RETURN(std::string kind, String(it->second, "data.kind"));
      if (absl::Status known = io::DataIterForKind(kind).status(); !known.ok()) {
        return Error(it->second, "data.kind", known.message());
      }
      data->set_kind(kind);
    }
    if (data->kind() == "mnist") {
      for (const char* f : {"train", "test"}) {
        if (d.contains(f)) {
          return Error(d.at(f), Join("data", f),
                       "only for kinds csv and imagerecord (kind mnist reads IDX files)");
        }
      }
      RETURN_IF_ERROR(ParseMnistFiles(d, data));
    } else {
      for (const char* f : kMnistFields) {
        if (d.contains(f)) {
          return Error(d.at(f), Join("data", f),
                       absl::StrCat("only for kind mnist (kind ", data->kind(),
                                    " reads data.train and data.test)"));
        }
      }
      ASSIGN_OR_RETURN(const std::string iter, io::DataIterForKind(data->kind()));
      if (!d.contains("train")) {
        return Required(absl::StrCat("data.train (the ", iter, " arguments)"));
      }
      RETURN_IF_ERROR(ParseIterArgs(d.at("train"), "data.train", iter, /*test=*/false,
                                    data->mutable_train_iter()));
      if (auto it = d.find("test"); it != d.end()) {
        RETURN_IF_ERROR(
            ParseIterArgs(it->second, "data.test", iter, /*test=*/true, data->mutable_test_iter()));
      }
    }
    data->set_shuffle(true);
    if (auto it = d.find("shuffle"); it != d.end()) {
      ASSIGN_OR_RETURN(bool shuffle, Bool(it->second, "data.shuffle"));
      data->set_shuffle(shuffle);
    }
    return absl::OkStatus();
  }

  absl::Status ParseMnistFiles(const Entries& d, DataSpec* data) const {
    const char* files[] = {"train_images", "train_labels", "test_images", "test_labels"};
    if (auto it = d.find("dir"); it != d.end()) {
      for (const char* f : files) {
        if (d.contains(f)) {
          return Error(d.at(f), Join("data", f), "give either data.dir or the files, not both");
        }
      }
      ASSIGN_OR_RETURN(std::string dir, Path(it->second, "data.dir"));
      data->set_train_images((fs::path(dir) / kTrainImages).string());
      data->set_train_labels((fs::path(dir) / kTrainLabels).string());
      data->set_test_images((fs::path(dir) / kTestImages).string());
      data->set_test_labels((fs::path(dir) / kTestLabels).string());
    } else {
      for (const char* f : {"train_images", "train_labels"}) {
        if (!d.contains(f)) return Required(absl::StrCat("data.", f, " (or data.dir)"));
      }
      if (d.contains("test_images") != d.contains("test_labels")) {
        const char* given = d.contains("test_images") ? "test_images" : "test_labels";
        return Error(d.at(given), Join("data", given),
                     "give both test_images and test_labels, or neither");
      }
      std::string resolved[4];
      for (int i = 0; i < 4; ++i) {
        if (auto it = d.find(files[i]); it != d.end()) {
          ASSIGN_OR_RETURN(resolved[i], Path(it->second, Join("data", files[i])));
        }
      }
      data->set_train_images(resolved[0]);
      data->set_train_labels(resolved[1]);
      data->set_test_images(resolved[2]);
      data->set_test_labels(resolved[3]);
    }
    if (auto it = d.find("flat"); it != d.end()) {
      ASSIGN_OR_RETURN(bool flat, Bool(it->second, "data.flat"));
      data->set_flat(flat);
    }
    return absl::OkStatus();
  }

  // data.train / data.test of kinds csv and imagerecord: the arguments of `iter` in MXNet's
  // names, each checked by the iterator itself (io::CheckDataIterKwargs) so that a typo or a
  // bad value fails here, not on every worker once the cluster is up. Values are kept as the
  // YAML text wrote them; a list [3, 28, 28] becomes MXNet's tuple "(3,28,28)".
  absl::Status ParseIterArgs(const Entry& e, const std::string& path, const std::string& iter,
                             bool test,
                             google::protobuf::Map<std::string, std::string>* out) const {
    // Any key: the iterator says which it knows.
    ASSIGN_OR_RETURN(Entries args, Map(e.value, e.key, path, {}));
    io::IterKwargs kwargs;
    for (const auto& [key, entry] : args) {
      const std::string key_path = Join(path, key);
      if (std::optional<std::string> set = jobs::JobSetsIterArgument(key, test)) {
        return Error(entry, key_path, *set);
      }
      ASSIGN_OR_RETURN(std::string value, IterValue(entry, key_path));
      // "NULL" is MXNet's "no file" (label_csv); it and "" are not paths.
      // Files the iterator reads: resolved against the job file's folder like data.dir.
      if (io::IsFileArgument(key) && !value.empty() && value != "NULL") value = Resolve(value);
      if (absl::Status alone = io::CheckDataIterKwargs(iter, {{key, value}}); !alone.ok()) {
        return Error(entry, key_path, alone.message());
      }
      kwargs.emplace(key, std::move(value));
    }
    const char* required[] = {iter == "CSVIter" ? "data_csv" : "path_imgrec", "data_shape"};
    for (const char* key : required) {
      if (!kwargs.contains(key)) return Error(e, Join(path, key), "required");
    }
    // What only the arguments together can get wrong (round_batch with last_batch_handle).
    if (absl::Status all = io::CheckDataIterKwargs(iter, kwargs); !all.ok()) {
      return Error(e, path, all.message());
    }
    for (auto& [key, value] : kwargs) (*out)[key] = std::move(value);
    return absl::OkStatus();
  }

  // One iterator argument: a scalar as written, or a list of scalars as "(a,b,c)".
  absl::StatusOr<std::string> IterValue(const Entry& e, const std::string& path) const {
    if (e.value.IsScalar()) return e.value.Scalar();
    if (e.value.IsSequence() && e.value.size() > 0) {
      std::vector<std::string> items;
      for (size_t i = 0; i < e.value.size(); ++i) {
        const YAML::Node item = e.value[i];
        if (!item.IsScalar()) {
          return Error(item, absl::StrCat(path, "[", i, "]"),
                       absl::StrCat("expected a number, got ", Describe(item)));
        }
        items.push_back(item.Scalar());
      }
      return absl::StrCat("(", absl::StrJoin(items, ","), ")");
    }
    return Error(
        e, path,
        absl::StrCat("expected a value or a list such as [3, 28, 28], got ", Describe(e.value)));
  }

  // A map of free-form keys to scalars (an optimizer's or a scheduler's arguments), by key;
  // a non-scalar value is an error naming its path and saying it expected `expected`.
  absl::StatusOr<std::vector<std::pair<std::string, Entry>>> ScalarParams(
      const Entry& e, const std::string& path, const char* expected) const {
    ASSIGN_OR_RETURN(Entries map, Map(e.value, e.key, path, {}));
    std::vector<std::pair<std::string, Entry>> params;
    for (auto& [key, entry] : map) {
      if (!entry.value.IsScalar()) {
        return Error(entry, Join(path, key),
                     absl::StrCat("expected ", expected, ", got ", Describe(entry.value)));
      }
      params.emplace_back(key, entry);
    }
    return params;
  }

  absl::Status ParseOptimizer(const Entry& e, JobSpec* spec) const {
    std::string name = "sgd";
    // Constructed, never assigned: assigning a YAML::Node overwrites the node it refers to.
    std::optional<Entry> name_entry;
    std::vector<std::pair<std::string, Entry>> params;
    if (e.value.IsScalar()) {
      name = e.value.Scalar();
    } else {
      ASSIGN_OR_RETURN(Entries opt,
                       Map(e.value, e.key, "optimizer", {"name", "params", "lr_scheduler"}));
      if (auto it = opt.find("lr_scheduler"); it != opt.end()) {
        RETURN_IF_ERROR(ParseLrScheduler(it->second, spec));
      }
      if (auto it = opt.find("name"); it != opt.end()) {
        ASSIGN_OR_RETURN(name, String(it->second, "optimizer.name"));
        name_entry.emplace(it->second);
      }
      if (auto it = opt.find("params"); it != opt.end()) {
        // Any key: the optimizer itself says which it knows (checked below).
        ASSIGN_OR_RETURN(params, ScalarParams(it->second, "optimizer.params", "a number"));
      }
    }
    // The optimizer's own checks (names, types, ranges), before any cluster starts.
    if (auto made = kvstore::Optimizer::Create(name, {}); !made.ok()) {
      return Error(name_entry ? *name_entry : e,
                   e.value.IsScalar() ? "optimizer" : "optimizer.name", made.status().message());
    }
    ops::KwArgs kwargs;
    for (const auto& [key, entry] : params) kwargs.emplace_back(key, entry.value.Scalar());
    if (auto made = kvstore::Optimizer::Create(name, kwargs); !made.ok()) {
      // Name the parameter at fault when one alone is.
      for (const auto& [key, entry] : params) {
        if (auto alone = kvstore::Optimizer::Create(name, {{key, entry.value.Scalar()}});
            !alone.ok()) {
          return Error(entry, Join("optimizer.params", key), alone.status().message());
        }
      }
      return Error(e, "optimizer.params", made.status().message());
    }
    spec->set_optimizer(name);
    for (const auto& [key, value] : kwargs) (*spec->mutable_optimizer_params())[key] = value;
    return absl::OkStatus();
  }

  // optimizer.lr_scheduler: a name ("cosine") or {name, params}; checked by creating it.
  absl::Status ParseLrScheduler(const Entry& e, JobSpec* spec) const {
    constexpr const char* kPath = "optimizer.lr_scheduler";
    std::string name;
    std::vector<std::pair<std::string, std::string>> args;
    if (e.value.IsScalar()) {
      name = e.value.Scalar();
    } else {
      ASSIGN_OR_RETURN(Entries sched, Map(e.value, e.key, kPath, {"name", "params"}));
      auto it = sched.find("name");
      if (it == sched.end()) return Error(e, kPath, "needs a name (factor, multifactor, cosine)");
      ASSIGN_OR_RETURN(name, String(it->second, Join(kPath, "name")));
      if (auto p = sched.find("params"); p != sched.end()) {
        ASSIGN_OR_RETURN(auto params, ScalarParams(p->second, Join(kPath, "params"), "a value"));
        for (const auto& [key, entry] : params) args.emplace_back(key, entry.value.Scalar());
      }
    }
    if (auto made = kvstore::CreateLRScheduler(name, args); !made.ok()) {
      return Error(e, kPath, made.status().message());
    }
    spec->set_lr_scheduler(name);
    for (const auto& [key, value] : args) (*spec->mutable_lr_scheduler_params())[key] = value;
    return absl::OkStatus();
  }

  const std::string file_;
  const std::string base_dir_;
  const ClusterOverride cluster_;
};

}  // namespace

absl::StatusOr<JobFile> ParseJobFile(const std::string& yaml_text, const std::string& base_dir,
                                     const std::string& file_name_for_errors,
                                     const ClusterOverride& cluster) {
  if ((cluster.workers && *cluster.workers < 1) || (cluster.servers && *cluster.servers < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(file_name_for_errors,
                                                   ": the launcher's cluster needs at least 1 "
                                                   "worker and 1 server"));
  }
  return Parser(file_name_for_errors, base_dir, cluster).Parse(yaml_text);
}

bool IsLocalKVStore(const std::string& kvstore) {
  absl::StatusOr<kvstore::KVStoreKind> kind = kvstore::ParseKVStoreType(kvstore);
  return !kind.ok() || !kind->dist;
}

absl::StatusOr<JobFile> LoadJobFile(const std::string& path, const ClusterOverride& cluster,
                                    const std::string& base_dir) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrCat("cannot read job file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading job file '", path, "'"));
  std::string dir = base_dir;
  if (dir.empty()) {
    std::error_code ec;
    fs::path folder = fs::absolute(fs::path(path), ec).parent_path();
    if (ec) folder = fs::path(path).parent_path();
    dir = folder.lexically_normal().string();
  }
  ASSIGN_OR_RETURN(JobFile job, ParseJobFile(text.str(), dir, path, cluster));
  // What the coordinator and the workers will check, before anything starts.
  if (absl::Status checked = jobs::CheckJobSpec(job.spec); !checked.ok()) {
    return absl::Status(checked.code(), absl::StrCat(path, ": ", checked.message()));
  }
  return job;
}

}  // namespace tessera::client
