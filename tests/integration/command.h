// A command-line program run to its end by a multi-process test: its exit code, output and
// error output. Each run writes its output under the test's TEST_TMPDIR.
#ifndef TESSERA_TESTS_INTEGRATION_COMMAND_H_
#define TESSERA_TESTS_INTEGRATION_COMMAND_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera::integration {

struct Command {
  int code = -1;  // exit code; -1 if killed or timed out
  std::string out, err;
  std::vector<std::string> lines;  // of out, non-empty
};

// `argv`, run to its end; past `timeout` the test fails and the program gets SIGTERM (the
// tessera CLI then cancels its job and stops its daemons). Thread-safe.
Command RunCommand(const std::vector<std::string>& argv,
                   absl::Duration timeout = absl::Seconds(180));

}  // namespace tessera::integration

#endif  // TESSERA_TESTS_INTEGRATION_COMMAND_H_
