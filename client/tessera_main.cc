// `tessera`: the command line. A thin shell: each command is a call into a library.
//
//   tessera ops [NAME] [--json]  list every registered operator (or one), with its arguments,
//                        outputs, auxiliary states and parameters
//   tessera graph inspect FILE.json [--shape NAME=D1,D2,...]...
//   tessera graph run FILE.json [--params FILE] [--seed N] [--device D] [--amp DTYPE] --input NAME=FILE.npy...
//                        --output DIR
//   tessera params convert IN OUT --format tessera|mxnet
//                        a parameter file of either format (ndarray/params_file.h) rewritten
//                        in the one named
//   tessera data pack SOURCE OUTPUT [--resize N] [--quality Q] [--root DIR] [--skip_bad B]
//                        images (a folder of class folders, or a .lst) into OUTPUT.rec/.idx
//   tessera certs DIR --hosts HOST,... [--days N]
//                        a CA and a --tls_dir folder per host (rpc/certificates.h)
//   tessera job spec JOB.yaml --output FILE [--base_dir DIR]
//                        the JobSpec a job file makes, checked (client/job_file.h), as binary
//                        protobuf: the Python SDK builds its jobs with it
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cluster_command.h"
#include "client/graph_commands.h"
#include "client/job_file.h"
#include "client/jobs_command.h"
#include "client/train_command.h"
#include "core/file.h"
#include "engine/create_engine.h"
#include "graph/symbol_json.h"
#include "io/image_pack.h"
#include "ndarray/params_file.h"
#include "ndarray/runtime.h"
#include "ops/registry.h"
#include "ops/registry_json.h"
#include "rpc/certificates.h"

namespace {

// The commands, on `out`; the exit code is 0 when the user asked for them (--help), 2 when
// the command line was wrong.
int Usage(std::FILE* out = stderr) {
  std::fprintf(
      out,
      "usage: tessera COMMAND [ARGS...]\n\n"
      "  ops [NAME] [--json]        list every registered operator (or one) with its\n"
      "                             arguments, outputs and parameters\n"
      "  graph inspect FILE.json [--shape NAME=D1,D2,...]...\n"
      "                             arguments, auxiliary states and outputs of a symbol\n"
      "                             file with their shapes, and the parameter count\n"
      "  graph run FILE.json --input NAME=FILE.npy... --output DIR\n"
      "            [--params FILE] [--seed N] [--device cpu(0)|gpu(N)]\n"
      "            [--amp bfloat16|float16]\n"
      "                             the forward pass on .npy inputs; each output is\n"
      "                             written to DIR/<output>.npy (--amp: in mixed\n"
      "                             precision, outputs written as float32)\n"
      "  params convert IN OUT --format tessera|mxnet\n"
      "                             a parameter file of either format (Tessera's, or\n"
      "                             MXNet's .params) written in the one named\n"
      "  data pack SOURCE OUTPUT [--resize N] [--quality Q] [--root DIR] [--skip_bad B]\n"
      "                             pack images (a folder with a sub-folder per class,\n"
      "                             or an im2rec .lst file) into OUTPUT.rec + OUTPUT.idx\n"
      "  train JOB.yaml [--json]    a training job on an embedded local cluster\n"
      "  launch -n W -s S JOB.yaml  the job on a local cluster of W workers, S servers\n"
      "  cluster [-n W] [-s S] [--run_dir DIR]\n"
      "                             a local cluster held up until stdin ends; its\n"
      "                             addresses as one JSON line (the Python SDK's)\n"
      "  submit --workers H:P,... [--servers H:P,...] JOB.yaml [--no-wait]\n"
      "                             the job on daemons already running; the cluster runs\n"
      "                             it to its end whether or not this command follows it\n"
      "  jobs --workers H:P,...     the cluster's jobs: queued, running and finished\n"
      "  attach|wait|cancel ID --workers H:P,...\n"
      "                             follow a job, wait for its end, or stop it\n"
      "  status --workers H:P,...   what each worker daemon is doing\n"
      "  certs DIR --hosts HOST,... [--days N]\n"
      "                             a cluster CA (DIR/ca.pem) and, per host, a folder\n"
      "                             DIR/HOST for --tls_dir (ca.pem, cert.pem, key.pem)\n"
      "  job spec JOB.yaml --output FILE [--base_dir DIR]\n"
      "                             the job file's JobSpec, checked, as binary protobuf\n"
      "                             (relative paths from DIR, default the file's folder)\n"
      "  help, --help, -h           this text\n");
  return out == stderr ? 2 : 0;
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "tessera %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return 1;
}

int RunOps(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  const auto json = std::find(args.begin(), args.end(), "--json");
  const bool as_json = json != args.end();
  if (as_json) args.erase(json);
  if (args.size() > 1) return Usage();
  const std::string only = args.empty() ? "" : args[0];
  absl::StatusOr<std::string> text =
      as_json ? tessera::ops::DescribeOperatorsJson(only) : tessera::ops::DescribeOperators(only);
  if (!text.ok()) return Fail("ops", text.status());
  std::fputs(text->c_str(), stdout);
  return 0;
}

// Flags of `graph` subcommands: "--name value" or "--name=value", repeatable.
absl::StatusOr<std::multimap<std::string, std::string>> ParseFlags(int argc, char** argv, int first,
                                                                  const std::vector<std::string>& known) {
  std::multimap<std::string, std::string> flags;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    flags.emplace(name, value);
  }
  return flags;
}

int RunGraph(int argc, char** argv) {
  if (argc < 4) return Usage();
  const std::string sub = argv[2], command = absl::StrCat("graph ", sub);
  absl::StatusOr<tessera::graph::Symbol> symbol = tessera::graph::LoadSymbolFile(argv[3]);
  if (!symbol.ok()) return Fail(command, symbol.status());
  if (sub == "inspect") {
    auto flags = ParseFlags(argc, argv, 4, {"shape"});
    if (!flags.ok()) return Fail(command, flags.status());
    std::map<std::string, tessera::Shape> shapes;
    for (const auto& [name, value] : *flags) {
      auto shape = tessera::client::ParseShapeFlag(value);
      if (!shape.ok()) return Fail(command, shape.status());
      shapes[shape->first] = shape->second;
    }
    auto text = tessera::client::InspectGraph(*symbol, shapes);
    if (!text.ok()) return Fail(command, text.status());
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  if (sub != "run") return Usage();
  auto flags = ParseFlags(argc, argv, 4, {"input", "output", "params", "seed", "device", "amp"});
  if (!flags.ok()) return Fail(command, flags.status());
  tessera::client::RunGraphOptions options;
  for (const auto& [name, value] : *flags) {
    if (name == "input") {
      auto input = tessera::client::ParseNamedPathFlag(value);
      if (!input.ok()) return Fail(command, input.status());
      options.inputs[input->first] = input->second;
    } else if (name == "output") {
      options.output_dir = value;
    } else if (name == "params") {
      options.params_path = value;
    } else if (name == "device") {
      auto device = tessera::Context::Parse(value);
      if (!device.ok()) {
        return Fail(command, absl::InvalidArgumentError(
                                 absl::StrCat("--device '", value, "': ", device.status().message())));
      }
      options.device = *device;
    } else if (name == "amp") {
      auto dtype = tessera::ParseDType(value);
      if (!dtype.ok()) {
        return Fail(command, absl::InvalidArgumentError(
                                 absl::StrCat("--amp '", value, "': ", dtype.status().message())));
      }
      options.amp = *dtype;
    } else if (!absl::SimpleAtoi(value, &options.seed)) {
      return Fail(command, absl::InvalidArgumentError(absl::StrCat("--seed '", value, "' is not a number")));
    }
  }
  if (options.output_dir.empty()) return Fail(command, absl::InvalidArgumentError("--output DIR is required"));
  auto rt = tessera::OwnedRuntime::Create(tessera::engine::EngineOptions{}, tessera::engine::StorageOptions{},
                                          options.seed);
  if (!rt.ok()) return Fail(command, rt.status());
  auto written = tessera::client::RunGraph((*rt)->get(), *symbol, options);
  if (!written.ok()) return Fail(command, written.status());
  for (const std::string& path : *written) std::printf("%s\n", path.c_str());
  return 0;
}

int RunParams(int argc, char** argv) {
  if (argc < 5 || std::string(argv[2]) != "convert") return Usage();
  const std::string command = "params convert", in = argv[3], out = argv[4];
  auto flags = ParseFlags(argc, argv, 5, {"format"});
  if (!flags.ok()) return Fail(command, flags.status());
  if (flags->count("format") != 1) {
    return Fail(command, absl::InvalidArgumentError("give --format tessera|mxnet once"));
  }
  const std::string format_name = flags->find("format")->second;
  absl::StatusOr<tessera::ParamsFormat> format = tessera::ParseParamsFormat(format_name);
  if (!format.ok()) return Fail(command, format.status());
  auto rt = tessera::OwnedRuntime::Create(tessera::engine::EngineOptions{},
                                          tessera::engine::StorageOptions{});
  if (!rt.ok()) return Fail(command, rt.status());
  auto params = tessera::LoadParamsFile((*rt)->get(), in);
  if (!params.ok()) return Fail(command, params.status());
  if (absl::Status saved = tessera::SaveParamsFile(out, *params, *format); !saved.ok()) {
    return Fail(command, saved);
  }
  std::printf("wrote %zu arrays to %s (%s format)\n", params->size(), out.c_str(),
              format_name.c_str());
  return 0;
}

int RunData(int argc, char** argv) {
  if (argc < 5 || std::string(argv[2]) != "pack") return Usage();
  const std::string command = "data pack";
  tessera::io::PackOptions options;
  options.source = argv[3];
  options.output = argv[4];
  auto flags = ParseFlags(argc, argv, 5, {"resize", "quality", "root", "skip_bad"});
  if (!flags.ok()) return Fail(command, flags.status());
  for (const auto& [name, value] : *flags) {
    bool ok = true;
    if (name == "resize") {
      ok = absl::SimpleAtoi(value, &options.resize);
    } else if (name == "quality") {
      ok = absl::SimpleAtoi(value, &options.quality);
    } else if (name == "root") {
      options.root = value;
    } else {
      ok = absl::SimpleAtob(value, &options.skip_bad);
    }
    if (!ok) {
      return Fail(command, absl::InvalidArgumentError(
                               absl::StrCat("--", name, " '", value, "' is not a valid value")));
    }
  }
  auto summary = tessera::io::PackImages(options);
  if (!summary.ok()) return Fail(command, summary.status());
  std::printf("packed %lld images (%llu bytes) into %s.rec and %s.idx", static_cast<long long>(summary->records),
              static_cast<unsigned long long>(summary->bytes), options.output.c_str(), options.output.c_str());
  if (!summary->classes.empty()) std::printf(", %zu classes", summary->classes.size());
  if (summary->skipped_bad > 0) std::printf(", %lld undecodable skipped", static_cast<long long>(summary->skipped_bad));
  std::printf("\n");
  return 0;
}

int RunCerts(int argc, char** argv) {
  const std::string command = "certs";
  if (argc < 3) return Usage();
  tessera::rpc::CertificateOptions options;
  options.dir = argv[2];
  auto flags = ParseFlags(argc, argv, 3, {"hosts", "days"});
  if (!flags.ok()) return Fail(command, flags.status());
  for (const auto& [name, value] : *flags) {
    if (name == "hosts") {
      for (absl::string_view host : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        options.hosts.emplace_back(host);
      }
    } else if (!absl::SimpleAtoi(value, &options.valid_days)) {
      return Fail(command,
                  absl::InvalidArgumentError(absl::StrCat("--days '", value, "' is not a number")));
    }
  }
  absl::StatusOr<std::vector<std::string>> folders = tessera::rpc::MakeCertificates(options);
  if (!folders.ok()) return Fail(command, folders.status());
  std::printf("CA %s/ca.pem (its key: %s/ca.key, keep it off the daemons); --tls_dir folders:",
              options.dir.c_str(), options.dir.c_str());
  for (const std::string& folder : *folders) std::printf(" %s", folder.c_str());
  std::printf("\n");
  return 0;
}

// Errors start with the status code's name ("INVALID_ARGUMENT: ..."): the Python SDK raises
// them with that code.
int RunJobSpec(int argc, char** argv) {
  if (argc < 4 || std::string(argv[2]) != "spec") return Usage();
  const std::string path = argv[3];
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "tessera job spec: %s: %s\n",
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return 1;
  };
  auto flags = ParseFlags(argc, argv, 4, {"output", "base_dir"});
  if (!flags.ok()) return fail(flags.status());
  std::string output, base_dir;
  for (const auto& [name, value] : *flags) (name == "output" ? output : base_dir) = value;
  if (output.empty()) return fail(absl::InvalidArgumentError("--output FILE is required"));
  absl::StatusOr<tessera::client::JobFile> job = tessera::client::LoadJobFile(path, {}, base_dir);
  if (!job.ok()) return fail(job.status());
  std::string bytes;
  if (!job->spec.SerializeToString(&bytes)) {
    return fail(absl::InternalError("the JobSpec does not serialize"));
  }
  if (absl::Status written = tessera::WriteStringToFile(output, bytes); !written.ok()) {
    return fail(written);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") return Usage(stdout);
  if (command == "ops") return RunOps(argc, argv);
  if (command == "graph") return RunGraph(argc, argv);
  if (command == "params") return RunParams(argc, argv);
  if (command == "data") return RunData(argc, argv);
  if (command == "certs") return RunCerts(argc, argv);
  if (command == "job") return RunJobSpec(argc, argv);
  if (command == "cluster") return tessera::client::ClusterMain(argc, argv);
  if (command == "train" || command == "launch" || command == "submit" || command == "status") {
    return tessera::client::TrainMain(argc, argv);
  }
  if (command == "jobs" || command == "attach" || command == "wait" || command == "cancel") {
    return tessera::client::JobsMain(argc, argv);
  }
  std::fprintf(stderr, "tessera: unknown command '%s'\n", command.c_str());
  return Usage();
}
