// Fuzz target: RecordIO (io/recordio.h) through its file reader. The bytes are read as a .rec
// file, every record in turn (Next), each one again at its offset (ReadAt must agree), the
// byte-range scan over the whole file, and as a .idx index file.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz/require.h"
#include "fuzz/temp_file.h"
#include "io/recordio.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  static fuzz::TempFile file(".rec");
  const std::string& path = file.Write(data, size);

  (void)io::ReadRecordIndex(path);
  (void)io::ScanRecordOffsets(path, 0, size);
  auto reader = io::RecordIOReader::Open(path);
  if (!reader.ok()) return 0;
  std::string record;
  uint64_t last = 0;
  for (bool first = true;; first = false) {
    auto offset = (*reader)->Next(&record);
    if (!offset.ok() || !offset->has_value()) break;
    fuzz::Require(first || **offset > last, "Next moves forward");
    last = **offset;
    auto at = (*reader)->ReadAt(last);
    fuzz::RequireOk(at.status(), "ReadAt of an offset Next returned");
    fuzz::Require(*at == record, "ReadAt reads what Next read");
  }
  return 0;
}
