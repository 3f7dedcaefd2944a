// Tessera array files and the Tensor protobuf; .npy is in npy.cc. Shared helpers are in
// serialization_internal.h.
#include "ndarray/serialization.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ndarray/internal/byte_reader.h"
#include "ndarray/serialization_internal.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Tessera's file formats store little-endian data by copying memory");

namespace tessera {

// The protobuf enum is the DType enum on the wire.
static_assert(static_cast<int>(DT_FLOAT32) == static_cast<int>(DType::kFloat32));
static_assert(static_cast<int>(DT_FLOAT64) == static_cast<int>(DType::kFloat64));
static_assert(static_cast<int>(DT_FLOAT16) == static_cast<int>(DType::kFloat16));
static_assert(static_cast<int>(DT_UINT8) == static_cast<int>(DType::kUInt8));
static_assert(static_cast<int>(DT_INT32) == static_cast<int>(DType::kInt32));
static_assert(static_cast<int>(DT_INT8) == static_cast<int>(DType::kInt8));
static_assert(static_cast<int>(DT_INT64) == static_cast<int>(DType::kInt64));
static_assert(static_cast<int>(DT_BFLOAT16) == static_cast<int>(DType::kBFloat16));

namespace serialization_internal {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot open ", path, " for reading: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("error reading ", path));
  return out;
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, " for writing: ", std::strerror(errno)));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int err = errno;
  // fclose flushes: its failure (a full disk) is a failed write too.
  if (std::fclose(f) != 0 || written != bytes.size()) {
    return absl::UnavailableError(
        absl::StrCat("error writing ", bytes.size(), " bytes to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status AppendArrayData(const NDArray& array, std::string* out) {
  const size_t old_size = out->size();
  out->resize(old_size + array.data().Bytes());
  return array.SyncCopyToCPU(out->data() + old_size, array.Size());
}

absl::StatusOr<NDArray> ArrayFromBytes(const Runtime& rt, const Shape& shape, DType dtype,
                                       const char* data, Context ctx) {
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(rt, shape, ctx, dtype));
  RETURN_IF_ERROR(out.SyncCopyFromCPU(data, out.Size()));
  return out;
}

absl::StatusOr<size_t> CheckedByteSize(absl::Span<const int64_t> dims, DType dtype) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : dims) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("dimension ", d, " < 1"));
    if (static_cast<uint64_t>(d) > std::numeric_limits<int64_t>::max() / n) {
      return absl::InvalidArgumentError("array size overflows");
    }
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(n);
}

}  // namespace serialization_internal

namespace {

using serialization_internal::AppendArrayData;
using serialization_internal::ArrayFromBytes;
using serialization_internal::CheckedByteSize;

constexpr char kMagic[8] = {'T', 'S', 'R', 'N', 'D', 'A', 'R', 'R'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kFlagNamed = 1;

using ndarray_internal::ByteReader;
using ndarray_internal::PutLittleEndian;

}  // namespace

absl::StatusOr<std::string> EncodeArrays(absl::Span<const NDArray> arrays,
                                         absl::Span<const std::string> names) {
  if (!names.empty() && names.size() != arrays.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeArrays: ", names.size(), " names for ", arrays.size(), " arrays"));
  }
  std::string out(kMagic, sizeof(kMagic));
  PutLittleEndian<uint32_t>(&out, kVersion);
  PutLittleEndian<uint32_t>(&out, names.empty() ? 0 : kFlagNamed);
  PutLittleEndian<uint64_t>(&out, arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const NDArray& a = arrays[i];
    if (a.is_none()) {
      return absl::InvalidArgumentError(absl::StrCat("EncodeArrays: array ", i, " is none"));
    }
    if (!names.empty()) {
      if (names[i].size() > std::numeric_limits<uint32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("EncodeArrays: name ", i, " too long"));
      }
      PutLittleEndian<uint32_t>(&out, static_cast<uint32_t>(names[i].size()));
      out.append(names[i]);
    }
    if (a.shape().ndim() > kMaxSerializedDims) {
      return absl::InvalidArgumentError(absl::StrCat("EncodeArrays: array ", i, " has ",
                                                     a.shape().ndim(), " dimensions, more than ",
                                                     kMaxSerializedDims));
    }
    PutLittleEndian<int32_t>(&out, static_cast<int32_t>(a.dtype()));
    PutLittleEndian<uint32_t>(&out, static_cast<uint32_t>(a.shape().ndim()));
    for (int64_t d : a.shape()) PutLittleEndian<int64_t>(&out, d);
    RETURN_IF_ERROR(AppendArrayData(a, &out));
  }
  return out;
}

absl::StatusOr<ArrayFileContents> DecodeArrays(const Runtime& rt, const std::string& bytes,
                                               const std::string& source, Context ctx) {
  ByteReader r(bytes, source);
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a Tessera array file (bad magic: the first 8 bytes are not \"TSRNDARR\"; ",
        bytes.size(), " bytes in all)"));
  }
  (void)r.Take(sizeof(kMagic), "magic");
  ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>("the version"));
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": array file version ", version,
                                                   " is not supported (this build reads ", kVersion,
                                                   ")"));
  }
  const size_t flags_at = r.offset();
  ASSIGN_OR_RETURN(uint32_t flags, r.Get<uint32_t>("the flags"));
  if ((flags & ~kFlagNamed) != 0) return r.Corrupt(flags_at, absl::StrCat("unknown flags ", flags));
  const bool named = (flags & kFlagNamed) != 0;
  const size_t count_at = r.offset();
  ASSIGN_OR_RETURN(uint64_t count, r.Get<uint64_t>("the array count"));
  // Each entry takes at least 12 bytes (dtype, ndim, one dim) before its data.
  if (count > r.left() / 12) {
    return r.Corrupt(count_at, absl::StrCat("array count ", count, " cannot fit in the ", r.left(),
                                            " bytes left (truncated or corrupt)"));
  }
  ArrayFileContents out;
  out.named = named;
  std::set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    if (named) {
      ASSIGN_OR_RETURN(uint32_t len, r.Get<uint32_t>("a name length"));
      const size_t name_at = r.offset();
      ASSIGN_OR_RETURN(absl::string_view stored, r.Take(len, "a name"));
      std::string name(stored);
      if (!seen.insert(name).second) {
        return r.Corrupt(name_at, absl::StrCat("array name \"", name, "\" repeated"));
      }
      out.names.push_back(std::move(name));
    }
    const size_t dtype_at = r.offset();
    ASSIGN_OR_RETURN(int32_t dtype_value, r.Get<int32_t>("a dtype"));
    if (!IsValidDType(dtype_value)) {
      return r.Corrupt(dtype_at, absl::StrCat("invalid dtype ", dtype_value, " of array ", i));
    }
    const DType dtype = static_cast<DType>(dtype_value);
    const size_t ndim_at = r.offset();
    ASSIGN_OR_RETURN(uint32_t ndim, r.Get<uint32_t>("ndim"));
    if (ndim < 1 || ndim > kMaxSerializedDims) {
      return r.Corrupt(ndim_at, absl::StrCat("ndim ", ndim, " of array ", i, " not in [1, ",
                                             kMaxSerializedDims, "]"));
    }
    const size_t dims_at = r.offset();
    Shape shape;
    for (uint32_t d = 0; d < ndim; ++d) {
      ASSIGN_OR_RETURN(int64_t dim, r.Get<int64_t>("a dimension"));
      shape.push_back(dim);
    }
    absl::StatusOr<size_t> nbytes = CheckedByteSize(shape.dims(), dtype);
    if (!nbytes.ok()) {
      return r.Corrupt(dims_at, absl::StrCat("shape ", shape.ToString(), " of array ", i, ": ",
                                             nbytes.status().message()));
    }
    ASSIGN_OR_RETURN(absl::string_view data, r.Take(*nbytes, "array data"));
    ASSIGN_OR_RETURN(NDArray array, ArrayFromBytes(rt, shape, dtype, data.data(), ctx));
    out.arrays.push_back(std::move(array));
  }
  if (r.left() != 0) {
    return r.Corrupt(r.offset(), absl::StrCat(r.left(), " bytes after the last array"));
  }
  return out;
}

bool LooksLikeArrayFile(absl::string_view first_bytes) {
  return absl::StartsWith(first_bytes, absl::string_view(kMagic, sizeof(kMagic)));
}

absl::Status SaveArrays(const std::string& path, absl::Span<const NDArray> arrays) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeArrays(arrays));
  return serialization_internal::WriteFile(path, bytes);
}

absl::Status SaveArrays(const std::string& path, const std::map<std::string, NDArray>& arrays) {
  std::vector<std::string> names;
  std::vector<NDArray> values;
  for (const auto& [name, array] : arrays) {
    names.push_back(name);
    values.push_back(array);
  }
  // An empty map still needs the named flag so it loads back as a map.
  if (arrays.empty()) {
    std::string out(kMagic, sizeof(kMagic));
    PutLittleEndian<uint32_t>(&out, kVersion);
    PutLittleEndian<uint32_t>(&out, kFlagNamed);
    PutLittleEndian<uint64_t>(&out, 0);
    return serialization_internal::WriteFile(path, out);
  }
  ASSIGN_OR_RETURN(std::string bytes, EncodeArrays(values, names));
  return serialization_internal::WriteFile(path, bytes);
}

absl::StatusOr<ArrayFileContents> LoadArrayFile(const Runtime& rt, const std::string& path,
                                                Context ctx) {
  ASSIGN_OR_RETURN(std::string bytes, serialization_internal::ReadFile(path));
  return DecodeArrays(rt, bytes, path, ctx);
}

absl::StatusOr<std::vector<NDArray>> LoadArrays(const Runtime& rt, const std::string& path,
                                                Context ctx) {
  ASSIGN_OR_RETURN(ArrayFileContents contents, LoadArrayFile(rt, path, ctx));
  return std::move(contents.arrays);
}

absl::StatusOr<std::map<std::string, NDArray>> LoadArrayMap(const Runtime& rt,
                                                            const std::string& path, Context ctx) {
  ASSIGN_OR_RETURN(std::string bytes, serialization_internal::ReadFile(path));
  ASSIGN_OR_RETURN(ArrayFileContents contents, DecodeArrays(rt, bytes, path, ctx));
  if (!contents.named) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds a list of arrays without names, not a map"));
  }
  std::map<std::string, NDArray> out;
  for (size_t i = 0; i < contents.arrays.size(); ++i) {
    out.emplace(std::move(contents.names[i]), std::move(contents.arrays[i]));
  }
  return out;
}

// ---- Tensor protobuf ----

absl::Status ToTensorProto(const NDArray& array, Tensor* proto) {
  if (array.is_none()) return absl::InvalidArgumentError("ToTensorProto: a none array");
  proto->Clear();
  proto->set_dtype(static_cast<DataType>(array.dtype()));
  for (int64_t d : array.shape()) proto->add_shape(d);
  std::string* data = proto->mutable_data();
  return AppendArrayData(array, data);
}

absl::StatusOr<NDArray> FromTensorProto(const Runtime& rt, const Tensor& proto, Context ctx) {
  const int dtype_value = static_cast<int>(proto.dtype());
  if (!IsValidDType(dtype_value)) {
    return absl::InvalidArgumentError(absl::StrCat("FromTensorProto: unknown dtype ", dtype_value));
  }
  const DType dtype = static_cast<DType>(dtype_value);
  if (proto.shape_size() < 1 || proto.shape_size() > kMaxSerializedDims) {
    return absl::InvalidArgumentError(absl::StrCat("FromTensorProto: ", proto.shape_size(),
                                                   " dimensions; need 1 to ", kMaxSerializedDims));
  }
  const Shape shape(proto.shape().begin(), proto.shape().end());
  absl::StatusOr<size_t> nbytes = CheckedByteSize(shape.dims(), dtype);
  if (!nbytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FromTensorProto: shape ", shape.ToString(), ": ", nbytes.status().message()));
  }
  if (proto.data().size() != *nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("FromTensorProto: ", proto.data().size(),
                                                   " bytes of data for ", DTypeName(dtype), " ",
                                                   shape.ToString(), ", which needs ", *nbytes));
  }
  return ArrayFromBytes(rt, shape, dtype, proto.data().data(), ctx);
}

}  // namespace tessera
