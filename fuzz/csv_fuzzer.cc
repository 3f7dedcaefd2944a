// Fuzz target: CSVIter (io/csv_iter.h) over the bytes as data_csv. The first byte picks the
// options (sample shape, dtype, batch size, skip_bad), the rest is the file; every batch of
// one epoch is read.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_runtime.h"
#include "fuzz/require.h"
#include "fuzz/temp_file.h"
#include "io/csv_iter.h"
#include "spdlog/spdlog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  if (size < 1) return 0;
  // skip_bad's warning per input would be most of the run's time and output.
  static const bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  static fuzz::TempFile file(".csv");
  const uint8_t config = data[0];
  io::CSVIterOptions options;
  options.data_csv = file.Write(data + 1, size - 1);
  options.data_shape = (config & 4) != 0 ? Shape{2, 1 + (config & 3)} : Shape{1 + (config & 3)};
  constexpr DType kDTypes[] = {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kFloat32};
  options.dtype = kDTypes[(config >> 3) & 3];
  options.batch_size = 1 + ((config >> 5) & 3);
  options.skip_bad = (config & 0x80) != 0;
  options.silent = true;
  auto iter = io::CSVIter::Create(fuzz::FuzzRuntime(), options);
  if (!iter.ok()) return 0;
  int64_t batches = 0;
  for (;;) {
    auto more = (*iter)->Next();
    fuzz::RequireOk(more.status(), "Next over loaded samples");
    if (!*more) break;
    ++batches;
  }
  fuzz::Require(batches == (*iter)->num_batches(), "an epoch has num_batches() batches");
  return 0;
}
