// Parsing of MXNet-style iterator keyword arguments ({"batch_size", "64"},
// {"shuffle", "True"}, {"data_shape", "(3,224,224)"}), shared by every *IterOptions.
// Each parser names the iterator, the option and the value in its INVALID_ARGUMENT.
#ifndef TESSERA_IO_KWARGS_H_
#define TESSERA_IO_KWARGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
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

// Table-driven parsing of one iterator's keyword arguments: each key is bound to a field
// (parsed by the ParseKwarg above, strings taken as given) or to a function; any other key
// is UnknownKwarg. Keys are parsed in sorted order; the first error is returned.
class KwargParser {
 public:
  using ParseFn = std::function<absl::Status(const std::string& value)>;

  explicit KwargParser(absl::string_view iter) : iter_(iter) {}

  template <typename T>
  KwargParser& Field(const std::string& key, T* field) {
    return Custom(key, [iter = iter_, key, field](const std::string& value) {
      if constexpr (std::is_same_v<T, std::string>) {
        *field = value;
        return absl::OkStatus();
      } else {
        return ParseKwarg(iter, key, value, field);
      }
    });
  }
  KwargParser& Custom(const std::string& key, ParseFn parse) {
    fields_[key] = std::move(parse);
    return *this;
  }
  // The options every batching iterator has, by MXNet's names: batch_size, shuffle, seed,
  // num_parts, part_index, last_batch_handle, round_batch (MXNet's: true is "pad", false
  // "discard"; not together with last_batch_handle), data_name, label_name, silent.
  template <typename Options>
  KwargParser& BatchingOptions(Options* o) {
    Field("batch_size", &o->batch_size).Field("shuffle", &o->shuffle).Field("seed", &o->seed);
    Field("num_parts", &o->num_parts).Field("part_index", &o->part_index);
    Field("last_batch_handle", &o->last_batch_handle);
    Custom("round_batch", [iter = iter_, o](const std::string& value) {
      bool round = true;
      if (absl::Status s = ParseKwarg(iter, "round_batch", value, &round); !s.ok()) return s;
      o->last_batch_handle = round ? "pad" : "discard";
      return absl::OkStatus();
    });
    Field("data_name", &o->data_name).Field("label_name", &o->label_name);
    return Field("silent", &o->silent);
  }

  absl::Status Parse(const std::map<std::string, std::string>& kwargs) const;

 private:
  std::string iter_;
  std::map<std::string, ParseFn> fields_;
};

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
