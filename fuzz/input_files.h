// The files a fuzz corpus folder holds, for the drivers that replay inputs without libFuzzer
// (regression_main.cc, replay_main.cc).
#ifndef TESSERA_FUZZ_INPUT_FILES_H_
#define TESSERA_FUZZ_INPUT_FILES_H_

#include <optional>
#include <string>
#include <vector>

namespace tessera::fuzz {

// Regular files under `path` (recursively, sorted), or `path` itself when it is a file; empty
// when it does not exist (an empty regressions folder is not in the runfiles).
std::vector<std::string> ListInputFiles(const std::string& path);

// The whole file; nullopt if it cannot be read.
std::optional<std::string> ReadInputFile(const std::string& path);

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_INPUT_FILES_H_
