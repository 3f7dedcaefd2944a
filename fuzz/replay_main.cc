// main() of the *_fuzzer binaries in the everyday (gcc) build, where libFuzzer is absent:
// runs LLVMFuzzerTestOneInput once on every file given (folders recursively), so a crash file
// from `./tessera fuzz` can be replayed and debugged with the usual tools.
#include <cstdint>
#include <cstdio>

#include "fuzz/input_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...  (runs the fuzz target on each file)\n",
                 argv[0]);
    return 2;
  }
  int ran = 0;
  for (int i = 1; i < argc; ++i) {
    for (const std::string& path : tessera::fuzz::ListInputFiles(argv[i])) {
      std::optional<std::string> bytes = tessera::fuzz::ReadInputFile(path);
      if (!bytes) {
        std::fprintf(stderr, "%s: cannot read\n", path.c_str());
        return 1;
      }
      std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes->size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
      ++ran;
    }
  }
  std::fprintf(stderr, "%d inputs ran\n", ran);
  return ran > 0 ? 0 : 1;
}
