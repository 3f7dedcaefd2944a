// Fuzz target: job files (client/job_file.h), the bytes as YAML text. Relative paths resolve
// in an empty folder, so a symbol_file names nothing readable there.
#include <cstddef>
#include <cstdint>
#include <string>

#include "client/job_file.h"
#include "fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  static fuzz::TempDir base_dir;
  (void)client::ParseJobFile(std::string(reinterpret_cast<const char*>(data), size),
                             base_dir.path(), "fuzz.yaml");
  return 0;
}
