// gpu_train_bench: training throughput (samples/s) on gpu(0) through Module - forward +
// backward + SGD-with-momentum update per batch (lr 0.05, momentum 0.9), weights and
// optimizer state on the GPU, kvstore "local" with one device so the update runs there -
// against PyTorch on the same GPU, eager and with the whole step captured as a CUDA graph
// (bench/gpu_train_bench_pytorch.py). Rows: the MNIST MLP (784-128-64-10) and LeNet at batch
// 64 and 256, ResNet-18 for 32x32 images (examples::ResNet18Cifar) at batch 128. Both sides
// train on seeded random data already on the device (labels: integers stored as float here,
// int64 there), warm up for --warmup batches, and keep the fastest of --passes passes over
// --batches distinct batches.
//
// Last line: one JSON object naming the machine (GPU, compute capability, driver, CUDA
// runtime, cuDNN, CPU) and the peer (Python, torch, cuDNN), and per row <model>_b<batch>_:
// samples_per_s (ours, operator by operator, the optimizer one fused launch),
// graph_samples_per_s (ours with the whole step - forward, backward and the fused update - one
// captured CUDA graph, TESSERA_CUDA_GRAPHS=1), pytorch_eager_samples_per_s,
// pytorch_graph_samples_per_s, ratio_vs_eager (ours / PyTorch eager) and ratio_vs_graph (ours
// with graphs / PyTorch's captured step); > 1 means Tessera is faster, the targets are >= 1
// for both. A figure that could not be measured is left out and an _error string says why;
// the peer's figures are never made up.
//
// Robustness, because the first run happens on a machine where nothing can be fixed: each
// Tessera row runs in a child process (this program again, --child_row) with a time limit,
// so a crash or hang in a never-run GPU path costs that row, not the report; the peer runs
// first with its own limit; everything fits in --deadline_s. Without a usable GPU (no CUDA
// in the build, no driver, no device) it prints one line and
// {"bench":"gpu_train_bench","skipped":"<reason>"} and exits 0; --dry_run_on_cpu then runs
// the whole pipeline on cpu(0) instead (the peer eager on the CPU), to check it without a GPU.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/machine.h"
#include "bench/trainer_throughput.h"
#include "core/status_macros.h"
#include "core/subprocess.h"
#include "examples/models.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#endif

ABSL_FLAG(std::string, rows, "mlp:64,mlp:256,lenet:64,lenet:256,resnet18_cifar:128",
          "comma-separated MODEL:BATCH rows (models: mlp, lenet, resnet18_cifar)");
ABSL_FLAG(int, batches, 100, "distinct batches per timed pass");
ABSL_FLAG(int, warmup, 10, "batches trained before timing");
ABSL_FLAG(int, passes, 3, "timed passes; the fastest counts");
ABSL_FLAG(std::string, python, "python3", "the Python that runs the PyTorch peer (PATH lookup)");
ABSL_FLAG(std::string, peer_script, "",
          "the PyTorch peer; default: bench/gpu_train_bench_pytorch.py in this program's "
          "runfiles, next to it, or under the current folder or this program's folders");
ABSL_FLAG(int, peer_timeout_s, 240, "time limit of the PyTorch peer (all rows, both modes)");
ABSL_FLAG(int, row_timeout_s, 150, "time limit of one Tessera row");
ABSL_FLAG(int, deadline_s, 480,
          "the whole bench ends its children after this; under the 10 minutes a command "
          "gets on the GPU machines");
ABSL_FLAG(bool, isolate, true,
          "run each Tessera row in a child process (false: in this one, for debugging)");
ABSL_FLAG(bool, tf32, false,
          "let float32 convolutions and GEMMs use TF32 tensor cores on both sides "
          "(TESSERA_ALLOW_TF32 for ours, torch.backends.{cudnn,cuda.matmul}.allow_tf32 for the "
          "peer); off: both compute in plain float32, as the tests do");
ABSL_FLAG(bool, dry_run_on_cpu, false,
          "check the bench's plumbing on a machine without a GPU: train on cpu(0), the peer "
          "eager on the CPU (no CUDA graphs); the figures mean nothing");
ABSL_FLAG(std::string, child_row, "", "internal: measure this MODEL:BATCH row and print JSON");

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kPeerScript[] = "gpu_train_bench_pytorch.py";
constexpr int kPeerUnavailable = 3;  // the peer's exit status without torch or CUDA

struct Flags {
  std::string rows;
  int batches = 0, warmup = 0, passes = 0;
  std::string python, peer_script;
  int peer_timeout_s = 0, row_timeout_s = 0, deadline_s = 0;
  bool isolate = true;
  bool tf32 = false;
  bool dry_run_on_cpu = false;
  std::string child_row;

  Context device() const { return dry_run_on_cpu ? Context::CPU() : Context::GPU(0); }
};

struct Row {
  std::string model;
  int batch = 0;
  std::string Key() const { return absl::StrCat(model, "_b", batch); }
  std::string Spec() const { return absl::StrCat(model, ":", batch); }
};

// Messages on one line: the table prints them at the end of a row.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

absl::StatusOr<std::vector<Row>> ParseRows(const std::string& text) {
  std::vector<Row> rows;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> parts =
        absl::StrSplit(absl::StripAsciiWhitespace(item), ':');
    Row row{parts.first, 0};
    const std::vector<std::string> models = {"mlp", "lenet", "resnet18_cifar"};
    if (std::find(models.begin(), models.end(), row.model) == models.end() ||
        !absl::SimpleAtoi(parts.second, &row.batch) || row.batch < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad row '", item, "': want MODEL:BATCH, MODEL one of ", absl::StrJoin(models, ", ")));
    }
    rows.push_back(row);
  }
  if (rows.empty()) return absl::InvalidArgumentError("--rows names no row");
  return rows;
}

Flags ParseFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_train_bench: Module training samples/s on gpu(0) against PyTorch eager and CUDA-graph "
      "replay on the same GPU");
  absl::ParseCommandLine(argc, argv);
  Flags f{absl::GetFlag(FLAGS_rows),           absl::GetFlag(FLAGS_batches),
          absl::GetFlag(FLAGS_warmup),         absl::GetFlag(FLAGS_passes),
          absl::GetFlag(FLAGS_python),         absl::GetFlag(FLAGS_peer_script),
          absl::GetFlag(FLAGS_peer_timeout_s), absl::GetFlag(FLAGS_row_timeout_s),
          absl::GetFlag(FLAGS_deadline_s),     absl::GetFlag(FLAGS_isolate),
          absl::GetFlag(FLAGS_tf32),           absl::GetFlag(FLAGS_dry_run_on_cpu),
          absl::GetFlag(FLAGS_child_row)};
  if (f.batches < 1 || f.warmup < 0 || f.passes < 1 || f.peer_timeout_s < 1 ||
      f.row_timeout_s < 1 || f.deadline_s < 1) {
    std::fprintf(stderr,
                 "gpu_train_bench: --batches, --passes and the time limits must be >= 1, "
                 "--warmup >= 0\n");
    std::exit(2);
  }
  return f;
}

// Empty when gpu(0) is usable, else why not.
std::string NoGpuReason() {
#if TESSERA_USE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::StrCat("no usable GPU: cudaGetDeviceCount failed: ", cudaGetErrorName(err), " (",
                        cudaGetErrorString(err), ")");
  }
  return count == 0 ? "no usable GPU: cudaGetDeviceCount returned 0" : "";
#else
  return "built without CUDA (build with --config=cuda)";
#endif
}

// For the JSON line: more digits than the noise between runs only make it harder to read.
double Round(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

// A CUDA-style version number (1000 * major + 10 * minor) as "major.minor".
std::string CudaVersion(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

// The machine, for the JSON: what a later reader needs to compare figures across runs.
json Machine() {
  json m;
#if TESSERA_USE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, /*device=*/0) == cudaSuccess) {
    m["gpu"] = prop.name;
    m["compute_capability"] = absl::StrCat(prop.major, ".", prop.minor);
    m["gpu_memory_gib"] = Round(static_cast<double>(prop.totalGlobalMem) / (1ull << 30), 1);
  }
  int driver = 0, runtime = 0;
  // The driver's CUDA version is 0 where no driver is loaded.
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    m["cuda_driver"] = CudaVersion(driver);
  }
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) m["cuda_runtime"] = CudaVersion(runtime);
  // cuDNN 9 numbers its versions major * 10000 + minor * 100 + patch (8: * 1000 + * 100).
  const size_t cudnn = cudnnGetVersion();
  m["cudnn"] = cudnn >= 90000
                   ? absl::StrCat(cudnn / 10000, ".", (cudnn % 10000) / 100, ".", cudnn % 100)
                   : absl::StrCat(cudnn / 1000, ".", (cudnn % 1000) / 100, ".", cudnn % 100);
  m["cudnn_built_with"] = absl::StrCat(CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL);
#endif
  // The kernel module's release (e.g. 580.159.04), which the CUDA API does not report: the
  // first dotted number of "NVRM version: NVIDIA UNIX [Open] ... Kernel Module ... 580.159.04".
  std::ifstream nvrm("/proc/driver/nvidia/version");
  std::string line;
  if (std::getline(nvrm, line)) {
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      if (absl::ascii_isdigit(word[0]) && word.find('.') != std::string::npos &&
          word.find_first_not_of("0123456789.") == std::string::npos) {
        m["driver_release"] = word;
        break;
      }
    }
  }
  m["cpu"] = bench::CpuModel();
  m["cpu_isa"] = bench::CpuIsa();
  return m;
}

Shape DataShape(const Row& row) {
  if (row.model == "mlp") return Shape{row.batch, 784};
  if (row.model == "lenet") return Shape{row.batch, 1, 28, 28};
  return Shape{row.batch, 3, 32, 32};
}

// Trained parameters (arguments other than data and label), to show both sides train
// networks of the same size.
absl::StatusOr<int64_t> ParameterCount(const graph::Symbol& net, const Row& row) {
  ASSIGN_OR_RETURN(graph::InferResult<Shape> shapes,
                   net.InferShape({{"data", DataShape(row)}, {"softmax_label", Shape{row.batch}}}));
  const std::vector<std::string> names = net.ListArguments();
  int64_t count = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != "data" && names[i] != "softmax_label") count += shapes.arguments[i].Size();
  }
  return count;
}

// One row in this process: {"samples_per_s", "params"}.
absl::StatusOr<json> MeasureRow(const Row& row, const Flags& f) {
  ASSIGN_OR_RETURN(std::unique_ptr<OwnedRuntime> owned, OwnedRuntime::Create(/*seed=*/0));
  const Runtime& rt = owned->get();
  ASSIGN_OR_RETURN(graph::Symbol net, examples::BuiltinModel(row.model));
  ASSIGN_OR_RETURN(int64_t params, ParameterCount(net, row));
  ASSIGN_OR_RETURN(std::vector<io::DataBatch> batches,
                   bench::MakeRandomBatches(rt, DataShape(row), f.batches, f.device()));
  bench::TrainerOptions options{
      .context = f.device(),
      .sgd_params = {{"learning_rate", "0.05"}, {"momentum", "0.9"}},
      .warmup_batches = f.warmup,
      .passes = f.passes,
      .check_finite = true,
  };
  ASSIGN_OR_RETURN(double samples,
                   bench::MeasureTrainerSamplesPerSecond(rt, net, batches, options));
  return json{{"samples_per_s", samples}, {"params", params}};
}

// --child_row: one row, its JSON (or {"error"}) as the last line of stdout.
int ChildMain(const Flags& f) {
  absl::StatusOr<std::vector<Row>> rows = ParseRows(f.child_row);
  absl::StatusOr<json> result =
      rows.ok() ? MeasureRow(rows->front(), f) : absl::StatusOr<json>(rows.status());
  const json out = result.ok() ? *result : json{{"error", OneLine(result.status().ToString())}};
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return result.ok() ? 0 : 1;
}

// The last line of `text` that parses as a JSON object (a child's report), or nullopt.
std::optional<json> LastJsonLine(const std::string& text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    json parsed = json::parse(*it, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) return parsed;
  }
  return std::nullopt;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// What a child printed last, how it ended, or why it could not run.
struct ChildResult {
  std::optional<json> report;
  std::optional<ExitStatus> exit;
  std::string failure;  // empty when it ran to its end
};

ChildResult RunChild(const std::vector<std::string>& argv, absl::Duration limit,
                     const std::string& tag,
                     const std::vector<std::pair<std::string, std::string>>& env = {}) {
  ChildResult result;
  const std::string out_path =
      (fs::temp_directory_path() / absl::StrCat("gpu_train_bench.", getpid(), ".", tag, ".out"))
          .string();
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({.argv = argv, .env = env, .stdout_path = out_path});
  if (!child.ok()) {
    result.failure = absl::StrCat("cannot start ", argv[0], ": ", child.status().message());
    return result;
  }
  absl::StatusOr<ExitStatus> exit = (*child)->Wait(limit);
  if (!exit.ok()) {
    (void)(*child)->Signal(SIGKILL);
    (void)(*child)->Wait();
    result.failure = absl::StrCat("killed after its time limit of ", absl::ToInt64Seconds(limit),
                                  " s (hung or far too slow)");
  } else {
    result.exit = *exit;
  }
  result.report = LastJsonLine(ReadAll(out_path));
  std::error_code ignored;
  fs::remove(out_path, ignored);
  return result;
}

// bench/gpu_train_bench_pytorch.py wherever a build or a bundle puts it; the places looked
// at in `looked` when none holds it.
std::string FindPeerScript(const char* argv0, std::vector<std::string>* looked) {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& program : {exe, fs::path(argv0)}) {
    if (program.empty()) continue;
    // `bazel build` puts data files in the runfiles tree, not beside the binary.
    candidates.push_back(fs::path(program.string() + ".runfiles") / "tessera" / "bench" /
                         kPeerScript);
    // A GPU bundle keeps the runfiles' files at their workspace paths: beside the binary.
    candidates.push_back(program.parent_path() / kPeerScript);
  }
  if (const char* runfiles = std::getenv("RUNFILES_DIR")) {
    const char* workspace = std::getenv("TEST_WORKSPACE");
    candidates.push_back(fs::path(runfiles) / (workspace != nullptr ? workspace : "tessera") /
                         "bench" / kPeerScript);
  }
  candidates.push_back(fs::current_path(ec) / "bench" / kPeerScript);
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path()) {
    candidates.push_back(dir / "bench" / kPeerScript);
  }
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c.string();
    looked->push_back(c.string());
  }
  return "";
}

// LD_LIBRARY_PATH for the peer: without the GPU bundle's lib/ (beside this program's folder),
// whose Debian builds of zlib, OpenSSL, protobuf, ... must not shadow what the peer's Python
// and torch load; the CUDA folders stay.
std::string PeerLibraryPath() {
  const char* path = std::getenv("LD_LIBRARY_PATH");
  if (path == nullptr) return "";
  std::error_code ec;
  const fs::path bundle = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  std::vector<std::string> kept;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const bool ours =
        !bundle.empty() && (fs::equivalent(fs::path(std::string(dir)), bundle / "lib", ec) ||
                            fs::equivalent(fs::path(std::string(dir)), bundle / "_solib_k8", ec));
    if (!ours) kept.emplace_back(dir);
  }
  return absl::StrJoin(kept, ":");
}

// The peer's report: {"rows": [...], ...}, or {"error": why} when it is missing or failed.
json RunPeer(const Flags& f, const std::vector<Row>& rows, const char* argv0,
             absl::Duration limit) {
  std::string script = f.peer_script;
  if (script.empty()) {
    std::vector<std::string> looked;
    script = FindPeerScript(argv0, &looked);
    if (script.empty()) {
      return json{{"error", absl::StrCat("peer script ", kPeerScript, " not found (looked at ",
                                         absl::StrJoin(looked, ", "), "; give --peer_script)")}};
    }
  } else if (!fs::is_regular_file(script)) {
    return json{{"error", absl::StrCat("--peer_script ", script, " is not a file")}};
  }
  std::vector<std::string> specs;
  for (const Row& row : rows) specs.push_back(row.Spec());
  std::printf("peer: %s %s\n", f.python.c_str(), script.c_str());
  std::fflush(stdout);
  std::vector<std::string> argv = {f.python,    script,
                                   "--rows",    absl::StrJoin(specs, ","),
                                   "--batches", absl::StrCat(f.batches),
                                   "--warmup",  absl::StrCat(f.warmup),
                                   "--passes",  absl::StrCat(f.passes)};
  if (f.dry_run_on_cpu) argv.insert(argv.end(), {"--device", "cpu"});
  if (f.tf32) argv.push_back("--tf32");
  ChildResult r = RunChild(argv, limit, "peer", {{"LD_LIBRARY_PATH", PeerLibraryPath()}});
  json report = r.report.value_or(json::object());
  if (report.contains("partial") && report.contains("rows")) {
    // Killed or crashed after some rows: keep those, say why the others are missing.
    report["partial"] = absl::StrCat(
        "the PyTorch peer ",
        r.failure.empty() ? absl::StrCat("ended with ", r.exit->ToString()) : r.failure,
        " after the rows it reports");
  } else if (!r.failure.empty()) {
    report["error"] = absl::StrCat("the PyTorch peer ", r.failure);
  } else if (!(r.exit->exited && r.exit->code == 0) && !report.contains("error")) {
    report["error"] = absl::StrCat("the PyTorch peer (", f.python, " ", script, ") ended with ",
                                   r.exit->ToString(), " and no report; its stderr is above");
  } else if (r.exit->exited && r.exit->code == kPeerUnavailable && !report.contains("error")) {
    report["error"] = "the PyTorch peer found no torch or no CUDA device";
  } else if (!report.contains("error") && !report.contains("rows")) {
    report["error"] =
        absl::StrCat("the PyTorch peer (", f.python, " ", script, ") printed no JSON report");
  }
  if (report.contains("error")) report.erase("rows");  // no figures from a failed peer
  return report;
}

// One Tessera row, with or without CUDA graphs: in a child process (the default) or here.
json RunTesseraRow(const Flags& f, const Row& row, bool cuda_graphs, absl::Duration limit) {
  const char* graphs = cuda_graphs ? "1" : "0";
  const char* tf32 = f.tf32 ? "1" : "0";
  if (!f.isolate) {
    setenv("TESSERA_CUDA_GRAPHS", graphs, /*overwrite=*/1);
    setenv("TESSERA_ALLOW_TF32", tf32, /*overwrite=*/1);
    absl::StatusOr<json> r = MeasureRow(row, f);
    return r.ok() ? *r : json{{"error", OneLine(r.status().ToString())}};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return json{{"error", "cannot read /proc/self/exe to start the row's process"}};
  std::vector<std::string> argv = {
      exe.string(), "--child_row=" + row.Spec(), absl::StrCat("--batches=", f.batches),
      absl::StrCat("--warmup=", f.warmup), absl::StrCat("--passes=", f.passes)};
  if (f.dry_run_on_cpu) argv.push_back("--dry_run_on_cpu");
  ChildResult r = RunChild(argv, limit, absl::StrCat(row.Key(), cuda_graphs ? "_graph" : ""),
                           {{"TESSERA_CUDA_GRAPHS", graphs}, {"TESSERA_ALLOW_TF32", tf32}});
  if (!r.failure.empty()) return json{{"error", r.failure}};
  if (r.report.has_value() &&
      (r.report->contains("samples_per_s") || r.report->contains("error"))) {
    return *r.report;
  }
  return json{{"error", absl::StrCat("the row's process ended with ", r.exit->ToString(),
                                     " before reporting (a crash; its stderr is above)")}};
}

// The peer's figure for `row` in `mode`, if it has one.
std::optional<double> PeerFigure(const json& peer, const Row& row, const std::string& mode,
                                 std::string* error) {
  if (!peer.contains("rows") || !peer["rows"].is_array()) return std::nullopt;
  for (const json& r : peer["rows"]) {
    if (!r.is_object() || r.value("model", "") != row.model || r.value("batch", 0) != row.batch) {
      continue;
    }
    const std::string key = mode + "_samples_per_s";
    if (r.contains(key) && r[key].is_number() && r[key].get<double>() > 0) {
      return r[key].get<double>();
    }
    if (r.contains(mode + "_error")) {
      const json& e = r[mode + "_error"];
      *error = OneLine(e.is_string() ? e.get<std::string>() : e.dump());
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::string Figure(std::optional<double> v, int decimals) {
  return v.has_value() ? absl::StrFormat("%.*f", decimals, *v) : "-";
}

int BenchMain(const Flags& f, const char* argv0) {
  absl::StatusOr<std::vector<Row>> rows = ParseRows(f.rows);
  if (!rows.ok()) {
    std::fprintf(stderr, "gpu_train_bench: %s\n", std::string(rows.status().message()).c_str());
    return 2;
  }
  if (const std::string reason = NoGpuReason(); !reason.empty() && !f.dry_run_on_cpu) {
    std::printf("gpu_train_bench: skipped: %s\n", reason.c_str());
    std::printf("%s\n", json{{"bench", "gpu_train_bench"}, {"skipped", reason}}.dump().c_str());
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto remaining = [&](int limit_s) {
    const absl::Duration left =
        absl::Seconds(f.deadline_s) - absl::FromChrono(std::chrono::steady_clock::now() - start);
    return std::min(absl::Seconds(limit_s), left);
  };
  json out = {{"bench", "gpu_train_bench"}};
  if (f.dry_run_on_cpu) out["dry_run_on_cpu"] = true;
  out["tf32"] = f.tf32;
  const json machine = Machine();
  out.update(machine);
  std::printf("machine: %s\n", machine.dump().c_str());
  std::fflush(stdout);

  // The peer first: a hang in one of our rows must not leave it without time.
  json peer = RunPeer(f, *rows, argv0, remaining(f.peer_timeout_s));
  if (peer.contains("error")) {
    out["peer_missing"] = OneLine(peer["error"].get<std::string>());
    std::printf("peer missing: %s\n", out["peer_missing"].get<std::string>().c_str());
  }
  json peer_info = peer;
  peer_info.erase("rows");
  peer_info.erase("error");
  if (peer.contains("partial")) {
    out["peer_partial"] = OneLine(peer["partial"].get<std::string>());
    std::printf("peer partial: %s\n", out["peer_partial"].get<std::string>().c_str());
  }
  peer_info.erase("partial");
  out["peer"] = peer_info;

  std::printf("%-20s %14s %14s %14s %14s %9s %9s\n", "row", "tessera", "tessera graph",
              "torch eager", "torch graph", "vs eager", "vs graph");
  std::optional<double> min_vs_eager;
  bool all_rows = true;
  for (const Row& row : *rows) {
    const std::string key = row.Key();
    const auto measure = [&](bool cuda_graphs, const std::string& prefix,
                             json* report) -> std::optional<double> {
      if (remaining(f.row_timeout_s) <= absl::ZeroDuration()) {
        *report =
            json{{"error", absl::StrCat("not run: --deadline_s ", f.deadline_s, " was spent")}};
      } else {
        *report = RunTesseraRow(f, row, cuda_graphs, remaining(f.row_timeout_s));
      }
      if (report->contains("samples_per_s") && (*report)["samples_per_s"].is_number()) {
        const double figure = (*report)["samples_per_s"].get<double>();
        out[prefix + "samples_per_s"] = Round(figure, 1);
        return figure;
      }
      out[prefix + "error"] = OneLine(report->value("error", std::string("no figure")));
      return std::nullopt;
    };
    json ours, ours_graph;
    const std::optional<double> tessera = measure(false, key + "_", &ours);
    const std::optional<double> tessera_graph = measure(true, key + "_graph_", &ours_graph);
    if (ours.contains("params")) out[key + "_params"] = ours["params"];
    std::string eager_error, graph_error;
    const std::optional<double> eager = PeerFigure(peer, row, "eager", &eager_error);
    const std::optional<double> graph = PeerFigure(peer, row, "graph", &graph_error);
    std::optional<double> vs_eager, vs_graph;
    if (eager.has_value()) out[key + "_pytorch_eager_samples_per_s"] = *eager;
    if (graph.has_value()) out[key + "_pytorch_graph_samples_per_s"] = *graph;
    if (!eager_error.empty()) out[key + "_pytorch_eager_error"] = eager_error;
    if (!graph_error.empty()) out[key + "_pytorch_graph_error"] = graph_error;
    if (tessera.has_value() && eager.has_value()) {
      vs_eager = *tessera / *eager;
      out[key + "_ratio_vs_eager"] = Round(*vs_eager, 3);
      min_vs_eager = std::min(min_vs_eager.value_or(*vs_eager), *vs_eager);
    } else {
      all_rows = false;
    }
    if (tessera_graph.has_value() && graph.has_value()) {
      vs_graph = *tessera_graph / *graph;
      out[key + "_ratio_vs_graph"] = Round(*vs_graph, 3);
    }
    // Both sides must train the same network: a parameter count that differs is a bug in
    // one of the two model definitions, so the row says so.
    for (const json& r : peer.value("rows", json::array())) {
      if (r.is_object() && r.value("model", "") == row.model && r.value("batch", 0) == row.batch &&
          r.contains("params") && ours.contains("params") && r["params"] != ours["params"]) {
        out[key + "_params_mismatch"] =
            absl::StrCat("Tessera ", ours["params"].dump(), ", PyTorch ", r["params"].dump());
      }
    }
    std::printf("%-20s %14s %14s %14s %14s %9s %9s%s\n", key.c_str(), Figure(tessera, 0).c_str(),
                Figure(tessera_graph, 0).c_str(), Figure(eager, 0).c_str(),
                Figure(graph, 0).c_str(), Figure(vs_eager, 2).c_str(), Figure(vs_graph, 2).c_str(),
                tessera.has_value() ? "" : ("  " + out[key + "_error"].get<std::string>()).c_str());
    std::fflush(stdout);
  }
  out["batches"] = f.batches;
  out["warmup"] = f.warmup;
  out["passes"] = f.passes;
  out["target_ratio_vs_eager"] = 1.0;
  out["target_ratio_vs_graph"] = 1.0;
  if (min_vs_eager.has_value()) {
    out["min_ratio_vs_eager"] = Round(*min_vs_eager, 3);
    out["meets_eager_target"] = all_rows && *min_vs_eager >= 1.0;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  const tessera::Flags flags = tessera::ParseFlags(argc, argv);
  if (!flags.child_row.empty()) return tessera::ChildMain(flags);
  return tessera::BenchMain(flags, argv[0]);
}
