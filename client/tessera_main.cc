// `tessera`: the command line. A thin shell: each command is a call into a library.
//
//   tessera ops [NAME]   list every registered operator (or one), with its arguments,
//                        outputs, auxiliary states and parameters
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "ops/registry.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: tessera COMMAND [ARGS...]\n\n"
               "  ops [NAME]   list every registered operator (or one) with its arguments,\n"
               "               outputs and parameters\n");
  return 2;
}

int RunOps(int argc, char** argv) {
  if (argc > 3) return Usage();
  absl::StatusOr<std::string> text = tessera::ops::DescribeOperators(argc == 3 ? argv[2] : "");
  if (!text.ok()) {
    std::fprintf(stderr, "tessera ops: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string command = argv[1];
  if (command == "ops") return RunOps(argc, argv);
  std::fprintf(stderr, "tessera: unknown command '%s'\n", command.c_str());
  return Usage();
}
