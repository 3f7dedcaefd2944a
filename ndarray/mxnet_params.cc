// MXNet's NDArray list file; the format is described in mxnet_params.h.
//
// Parsing runs in two passes: the first walks the whole file (every array, sparse ones
// included, then the names) checking only its structure, so that the second can refuse an
// array Tessera cannot hold by its name, which the file stores after all the arrays.
#include "ndarray/mxnet_params.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "ndarray/internal/byte_reader.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "MXNet's files store little-endian data, read and written by copying memory");

namespace tessera {
namespace {

constexpr uint64_t kListMagic = 0x112;
constexpr uint32_t kV1Magic = 0xF993FAC8;
constexpr uint32_t kV2Magic = 0xF993FAC9;
constexpr uint32_t kV3Magic = 0xF993FACA;

constexpr int32_t kDenseStorage = 0;
constexpr const char* kStorageNames[] = {"dense", "row_sparse", "csr"};
constexpr int32_t kCpuDevType = 1;

// mshadow's type flags, indexed by flag. `dtype` is kUnknown for the types Tessera lacks.
struct MxnetType {
  const char* name;
  size_t size;
  DType dtype;
};
constexpr MxnetType kMxnetTypes[] = {
    {"float32", 4, DType::kFloat32},   {"float64", 8, DType::kFloat64},
    {"float16", 2, DType::kFloat16},   {"uint8", 1, DType::kUInt8},
    {"int32", 4, DType::kInt32},       {"int8", 1, DType::kInt8},
    {"int64", 8, DType::kInt64},       {"bool", 1, DType::kUnknown},
    {"int16", 2, DType::kUnknown},     {"uint16", 2, DType::kUnknown},
    {"uint32", 4, DType::kUnknown},    {"uint64", 8, DType::kUnknown},
    {"bfloat16", 2, DType::kBFloat16},
};
constexpr int32_t kNumMxnetTypes = sizeof(kMxnetTypes) / sizeof(kMxnetTypes[0]);

std::optional<int32_t> MxnetTypeFlag(DType dtype) {
  for (int32_t flag = 0; flag < kNumMxnetTypes; ++flag) {
    if (dtype != DType::kUnknown && kMxnetTypes[flag].dtype == dtype) return flag;
  }
  return std::nullopt;
}

using ndarray_internal::ByteReader;
using ndarray_internal::PutLittleEndian;

// One array as the first pass found it.
struct ArrayRecord {
  size_t offset = 0;         // of its first byte
  bool numpy_shape = false;  // V3
  int32_t storage = kDenseStorage;
  bool none = false;
  std::vector<int64_t> dims;
  int32_t type_flag = 0;
  absl::string_view data;  // its elements (of a sparse array: the values, unused)
};

// product(dims) * element_size; nullopt when it overflows. Dims are >= 0.
std::optional<uint64_t> ByteSize(absl::Span<const int64_t> dims, size_t element_size) {
  uint64_t n = element_size;
  for (int64_t d : dims) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// A TShape: int32 ndim, int64 dims. ndim -1 (unknown) comes back as std::nullopt dims.
absl::StatusOr<std::optional<std::vector<int64_t>>> ReadShape(ByteReader& r,
                                                              absl::string_view what) {
  const size_t at = r.offset();
  ASSIGN_OR_RETURN(int32_t ndim, r.Get<int32_t>(absl::StrCat("the ndim of ", what)));
  if (ndim == -1) return std::nullopt;
  if (ndim < 0) return r.Corrupt(at, absl::StrCat("ndim ", ndim, " of ", what));
  // Checked before the vector is sized, so an absurd ndim allocates nothing.
  RETURN_IF_ERROR(r.Need(uint64_t{8} * ndim, absl::StrCat("the dims of ", what)));
  std::vector<int64_t> dims(ndim);
  for (int64_t& d : dims) d = *r.Get<int64_t>("a dim");
  return dims;
}

// A shape whose dims must all be >= 0 (storage and auxiliary shapes, which are never none).
absl::StatusOr<std::vector<int64_t>> ReadKnownShape(ByteReader& r, absl::string_view what) {
  const size_t at = r.offset();
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, ReadShape(r, what));
  if (!dims.has_value()) return r.Corrupt(at, absl::StrCat("ndim -1 of ", what));
  for (int64_t d : *dims) {
    if (d < 0) return r.Corrupt(at, absl::StrCat("dim ", d, " in ", what));
  }
  return *std::move(dims);
}

absl::StatusOr<size_t> ReadTypeFlag(ByteReader& r, absl::string_view what) {
  const size_t at = r.offset();
  ASSIGN_OR_RETURN(int32_t flag, r.Get<int32_t>(what));
  if (flag < 0 || flag >= kNumMxnetTypes) {
    return r.Corrupt(at, absl::StrCat(what, " is ", flag, ", not an MXNet type"));
  }
  return static_cast<size_t>(flag);
}

absl::StatusOr<absl::string_view> ReadData(ByteReader& r, absl::Span<const int64_t> dims,
                                           size_t type_flag, absl::string_view what) {
  const std::optional<uint64_t> nbytes = ByteSize(dims, kMxnetTypes[type_flag].size);
  if (!nbytes.has_value()) {
    return r.Corrupt(r.offset(), absl::StrCat("the size of ", what, " overflows"));
  }
  return r.Take(*nbytes, what);
}

// One array in any layout. Sparse arrays are walked over (their data is not kept).
absl::StatusOr<ArrayRecord> ReadArray(ByteReader& r, uint64_t index) {
  const std::string label = absl::StrCat("array ", index);
  ArrayRecord rec;
  rec.offset = r.offset();
  ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>(absl::StrCat("the header of ", label)));
  const bool has_storage_type = magic == kV2Magic || magic == kV3Magic;
  rec.numpy_shape = magic == kV3Magic;
  int num_aux = 0;
  std::vector<int64_t> storage_dims;
  if (has_storage_type) {
    const size_t at = r.offset();
    ASSIGN_OR_RETURN(rec.storage, r.Get<int32_t>(absl::StrCat("the storage type of ", label)));
    if (rec.storage < 0 || rec.storage > 2) {
      return r.Corrupt(at, absl::StrCat("unknown storage type ", rec.storage, " of ", label));
    }
    num_aux = rec.storage;  // row_sparse: indices; csr: indptr and indices
    if (num_aux > 0) {
      ASSIGN_OR_RETURN(storage_dims,
                       ReadKnownShape(r, absl::StrCat("the storage shape of ", label)));
    }
  }

  const size_t shape_at = r.offset();
  std::optional<std::vector<int64_t>> dims;
  if (has_storage_type || magic == kV1Magic) {
    ASSIGN_OR_RETURN(dims, ReadShape(r, absl::StrCat("the shape of ", label)));
  } else {
    // v0: the "magic" was the ndim, and dims are uint32.
    RETURN_IF_ERROR(r.Need(uint64_t{4} * magic, absl::StrCat("the dims of ", label)));
    dims.emplace(magic);
    for (int64_t& d : *dims) d = *r.Get<uint32_t>("a dim");
  }
  if (rec.numpy_shape) {
    rec.none = !dims.has_value() || absl::c_linear_search(*dims, -1);
  } else {
    rec.none = !dims.has_value() || dims->empty();
  }
  if (rec.none) return rec;
  rec.dims = *std::move(dims);
  for (int64_t d : rec.dims) {
    if (d < 0) return r.Corrupt(shape_at, absl::StrCat("dim ", d, " in the shape of ", label));
  }

  // The stored device is not used: the caller says where arrays go.
  RETURN_IF_ERROR(r.Take(8, absl::StrCat("the context of ", label)).status());
  ASSIGN_OR_RETURN(size_t type_flag, ReadTypeFlag(r, absl::StrCat("the type flag of ", label)));
  rec.type_flag = static_cast<int32_t>(type_flag);

  std::vector<std::pair<size_t, std::vector<int64_t>>> aux;  // type flag, shape
  for (int i = 0; i < num_aux; ++i) {
    const std::string aux_label = absl::StrCat("auxiliary array ", i, " of ", label);
    ASSIGN_OR_RETURN(size_t aux_type,
                     ReadTypeFlag(r, absl::StrCat("the type flag of ", aux_label)));
    ASSIGN_OR_RETURN(std::vector<int64_t> aux_dims,
                     ReadKnownShape(r, absl::StrCat("the shape of ", aux_label)));
    aux.emplace_back(aux_type, std::move(aux_dims));
  }
  const std::string data_label = absl::StrCat("the data of ", label);
  ASSIGN_OR_RETURN(rec.data,
                   ReadData(r, num_aux > 0 ? storage_dims : rec.dims, type_flag, data_label));
  for (size_t i = 0; i < aux.size(); ++i) {
    RETURN_IF_ERROR(ReadData(r, aux[i].second, aux[i].first,
                             absl::StrCat("the data of auxiliary array ", i, " of ", label))
                        .status());
  }
  return rec;
}

// `array 3 ("arg:fc1_weight")`, or `array 3` in an unnamed list.
std::string Describe(size_t index, const std::vector<std::string>& names) {
  if (names.empty()) return absl::StrCat("array ", index);
  return absl::StrCat("array ", index, " (\"", names[index], "\")");
}

// The shape Tessera gives the array, or why it has none.
absl::StatusOr<Shape> TesseraShape(const ArrayRecord& rec) {
  if (rec.storage != kDenseStorage) {
    return absl::InvalidArgumentError(
        absl::StrCat(kStorageNames[rec.storage], " storage is not supported (dense only)"));
  }
  if (rec.none) return absl::InvalidArgumentError("a none array (no shape, no data)");
  const MxnetType& type = kMxnetTypes[rec.type_flag];
  if (type.dtype == DType::kUnknown) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", type.name, " (MXNet type flag ",
                                                   rec.type_flag, ") is not supported"));
  }
  if (rec.dims.empty()) return Shape{1};  // a V3 scalar
  const Shape shape(rec.dims);
  if (shape.ndim() > kMaxSerializedDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape.ndim(), " dims, more than ", kMaxSerializedDims));
  }
  if (shape.Size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", shape.ToString(), " has no elements"));
  }
  return shape;
}

}  // namespace

absl::StatusOr<ArrayFileContents> ParseMxnetParams(const Runtime& rt, absl::string_view bytes,
                                                   const std::string& source, Context ctx) {
  ByteReader r(bytes, source);
  ASSIGN_OR_RETURN(uint64_t magic, r.Get<uint64_t>("the list magic"));
  if (magic != kListMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not an MXNet NDArray file: the uint64 at byte 0 is 0x",
                     absl::Hex(magic), ", not the magic 0x112"));
  }
  RETURN_IF_ERROR(r.Take(8, "the reserved field").status());
  const size_t count_at = r.offset();
  ASSIGN_OR_RETURN(uint64_t count, r.Get<uint64_t>("the array count"));
  // The shortest array (a v0 none array) takes 4 bytes.
  if (count > r.left() / 4) {
    return r.Corrupt(count_at, absl::StrCat("array count ", count, " cannot fit in the ", r.left(),
                                            " bytes left"));
  }
  std::vector<ArrayRecord> records;
  records.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(ArrayRecord rec, ReadArray(r, i));
    records.push_back(std::move(rec));
  }

  const size_t names_at = r.offset();
  ASSIGN_OR_RETURN(uint64_t name_count, r.Get<uint64_t>("the name count"));
  if (name_count != 0 && name_count != count) {
    return r.Corrupt(names_at, absl::StrCat(name_count, " names for ", count,
                                            " arrays (needs 0 or ", count, ")"));
  }
  ArrayFileContents out;
  out.named = name_count > 0 || count == 0;
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (uint64_t i = 0; i < name_count; ++i) {
    const std::string label = absl::StrCat("the name of array ", i);
    ASSIGN_OR_RETURN(uint64_t length, r.Get<uint64_t>(absl::StrCat("the length of ", label)));
    const size_t name_at = r.offset();
    ASSIGN_OR_RETURN(absl::string_view name, r.Take(length, label));
    if (auto [it, inserted] = seen.emplace(name, i); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": the name \"", name, "\" at byte ",
                                                     name_at, " names both array ", it->second,
                                                     " and array ", i));
    }
    out.names.emplace_back(name);
  }
  if (r.left() != 0) {
    return r.Corrupt(r.offset(), absl::StrCat(r.left(), " bytes after the names"));
  }

  for (size_t i = 0; i < records.size(); ++i) {
    const ArrayRecord& rec = records[i];
    absl::StatusOr<Shape> shape = TesseraShape(rec);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", Describe(i, out.names),
                                                     " at byte ", rec.offset, ": ",
                                                     shape.status().message()));
    }
    ASSIGN_OR_RETURN(NDArray array,
                     NDArray::Empty(rt, *shape, ctx, kMxnetTypes[rec.type_flag].dtype));
    RETURN_IF_ERROR(array.SyncCopyFromCPU(rec.data.data(), array.Size()));
    out.arrays.push_back(std::move(array));
  }
  return out;
}

absl::StatusOr<ArrayFileContents> LoadMxnetParams(const Runtime& rt, const std::string& path,
                                                  Context ctx) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseMxnetParams(rt, bytes, path, ctx);
}

absl::StatusOr<std::string> SerializeMxnetParams(const std::vector<std::string>& names,
                                                 absl::Span<const NDArray> arrays) {
  if (!names.empty() && names.size() != arrays.size()) {
    return absl::InvalidArgumentError(absl::StrCat("SerializeMxnetParams: ", names.size(),
                                                   " names for ", arrays.size(), " arrays"));
  }
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (auto [it, inserted] = seen.emplace(names[i], i); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat("SerializeMxnetParams: the name \"", names[i],
                                                     "\" is given to both array ", it->second,
                                                     " and array ", i));
    }
  }
  std::string out;
  PutLittleEndian<uint64_t>(&out, kListMagic);
  PutLittleEndian<uint64_t>(&out, 0);  // reserved
  PutLittleEndian<uint64_t>(&out, arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const NDArray& a = arrays[i];
    if (a.is_none()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SerializeMxnetParams: ", Describe(i, names), " is none"));
    }
    const std::optional<int32_t> type_flag = MxnetTypeFlag(a.dtype());
    if (!type_flag.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("SerializeMxnetParams: ", Describe(i, names),
                                                     " has dtype ", DTypeName(a.dtype())));
    }
    PutLittleEndian<uint32_t>(&out, kV2Magic);
    PutLittleEndian<int32_t>(&out, kDenseStorage);
    PutLittleEndian<int32_t>(&out, a.shape().ndim());
    for (int64_t d : a.shape()) PutLittleEndian<int64_t>(&out, d);
    PutLittleEndian<int32_t>(&out, kCpuDevType);
    PutLittleEndian<int32_t>(&out, 0);  // dev_id
    PutLittleEndian<int32_t>(&out, *type_flag);
    const size_t data_at = out.size();
    out.resize(data_at + a.data().Bytes());
    // Waits for pending writes and copies GPU arrays down.
    RETURN_IF_ERROR(a.SyncCopyToCPU(out.data() + data_at, a.Size()));
  }
  PutLittleEndian<uint64_t>(&out, names.size());
  for (const std::string& name : names) {
    PutLittleEndian<uint64_t>(&out, name.size());
    out.append(name);
  }
  return out;
}

absl::Status SaveMxnetParams(const std::string& path,
                             const std::map<std::string, NDArray>& arrays) {
  std::vector<std::string> names;
  std::vector<NDArray> values;
  for (const auto& [name, array] : arrays) {
    names.push_back(name);
    values.push_back(array);
  }
  absl::StatusOr<std::string> bytes = SerializeMxnetParams(names, values);
  if (!bytes.ok()) return Annotate(bytes.status(), path);
  return WriteStringToFile(path, *bytes);
}

bool LooksLikeMxnetParams(absl::string_view first_bytes) {
  uint64_t magic;
  if (first_bytes.size() < sizeof(magic)) return false;
  std::memcpy(&magic, first_bytes.data(), sizeof(magic));
  return magic == kListMagic;
}

}  // namespace tessera
