// Parsing of MXNet-style iterator keyword arguments ({"batch_size", "64"},
// {"shuffle", "True"}, {"data_shape", "(3,224,224)"}), shared by every *IterOptions.
// Each parser names the iterator, the option and the value in its INVALID_ARGUMENT.
#ifndef TESSERA_IO_KWARGS_H_
#define TESSERA_IO_KWARGS_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "core/shape.h"

namespace tessera::io {

// "<iter>: bad value '<value>' for option '<key>'" plus an optional reason.
absl::Status BadKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                      absl::string_view reason = "");
// "<iter>: unknown option '<key>'".
absl::Status UnknownKwarg(absl::string_view iter, absl::string_view key);

// 1/0/true/false in any case.
absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        bool* out);
absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        int* out);
absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        uint64_t* out);
absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        float* out);
// "(3,28,28)", "3,28,28" or "[3, 28, 28]"; every dimension positive.
absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        Shape* out);

// Part `part_index` of `num_parts` of `count` items: [begin, end) with begin =
// floor(count * k / n), as MXNet's GetPart, so the parts cover every item exactly once.
struct PartRange {
  int64_t begin = 0, end = 0;
};
// INVALID_ARGUMENT naming `iter` when part_index is not in [0, num_parts).
absl::Status CheckPart(absl::string_view iter, int part_index, int num_parts);
PartRange PartOf(int64_t count, int part_index, int num_parts);

}  // namespace tessera::io

#endif  // TESSERA_IO_KWARGS_H_
