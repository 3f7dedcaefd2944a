// Fuzz target: MNIST's IDX files (io/idx_file.h), opened with 1 to 4 dimensions. A file that
// opens must read all its rows, and a range past its end must be refused.
#include <cstddef>
#include <cstdint>

#include "fuzz/require.h"
#include "fuzz/temp_file.h"
#include "io/idx_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  static fuzz::TempFile file(".idx");
  const std::string& path = file.Write(data, size);
  for (int ndim = 1; ndim <= 4; ++ndim) {
    auto idx = io::IdxFile::Open(path, ndim);
    if (!idx.ok()) continue;
    const int64_t rows = idx->dims()[0];
    auto all = idx->ReadRows(0, rows);
    fuzz::RequireOk(all.status(), "ReadRows over every row of an opened file");
    fuzz::Require(static_cast<int64_t>(all->size()) == rows * idx->row_bytes(),
                  "ReadRows returns rows * row_bytes bytes");
    fuzz::Require(!idx->ReadRows(0, rows + 1).ok(), "ReadRows past the end is refused");
  }
  return 0;
}
