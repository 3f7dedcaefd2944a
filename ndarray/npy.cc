// NumPy .npy files (format described in serialization.h and in NumPy's
// numpy/lib/format.py): a magic string, a version, a little-endian header length, a Python
// dict literal with 'descr', 'fortran_order' and 'shape', then the raw data.
#include <cctype>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ndarray/serialization.h"
#include "ndarray/serialization_internal.h"

namespace tessera {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;

// The descr NumPy writes for `dtype`; null when NumPy has no such type (bfloat16).
const char* NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt8:
      return "|i1";
    default:
      return nullptr;
  }
}

absl::StatusOr<DType> DTypeFromDescr(const std::string& descr, const std::string& source) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unsupported .npy descr '", descr, "': ", why));
  };
  if (descr.size() != 3) return bad("expected a byte order and a type such as '<f4'");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  const bool one_byte = code == "u1" || code == "i1";
  if (order == '>' && !one_byte) return bad("big-endian data is not supported");
  if (order != '<' && order != '|' && order != '=' && !(order == '>' && one_byte)) {
    return bad("unknown byte order");
  }
  if (order == '|' && !one_byte) return bad("'|' is only valid for one-byte types");
  if (code == "f4") return DType::kFloat32;
  if (code == "f8") return DType::kFloat64;
  if (code == "f2") return DType::kFloat16;
  if (code == "i4") return DType::kInt32;
  if (code == "i8") return DType::kInt64;
  if (code == "u1") return DType::kUInt8;
  if (code == "i1") return DType::kInt8;
  return bad("supported are <f4 <f8 <f2 <i4 <i8 |u1 |i1");
}

// A parser for the one Python literal .npy headers hold: a dict of str keys to str, bool or
// tuple-of-int values.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
    bool has_descr = false, has_order = false, has_shape = false;
  };

  absl::StatusOr<Header> Parse() {
    Header h;
    RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      ASSIGN_OR_RETURN(std::string key, ParseString());
      RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        ASSIGN_OR_RETURN(h.descr, ParseString());
        h.has_descr = true;
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(h.fortran_order, ParseBool());
        h.has_order = true;
      } else if (key == "shape") {
        ASSIGN_OR_RETURN(h.shape, ParseTuple());
        h.has_shape = true;
      } else {
        return Error(absl::StrCat("unexpected key '", key, "'"));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Error("expected ',' or '}'");
      }
    }
    if (!h.has_descr || !h.has_order || !h.has_shape) {
      return Error("the header must have 'descr', 'fortran_order' and 'shape'");
    }
    return h;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": bad .npy header at character ", pos_,
                                                   ": ", what, " (header: ", text_, ")"));
  }
  absl::Status Expect(char c) {
    SkipSpace();
    if (Peek() != c) return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) return Error("unterminated string");
    std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> ParseBool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }
  absl::StatusOr<std::vector<int64_t>> ParseTuple() {
    RETURN_IF_ERROR(Expect('('));
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Peek() == ')') {
        ++pos_;
        return dims;
      }
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) return Error("expected a dimension");
      int64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) return Error("dimension too large");
        d = d * 10 + (text_[pos_++] - '0');
      }
      if (Peek() == 'L') ++pos_;  // Python 2 longs
      dims.push_back(d);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        return Error("expected ',' or ')'");
      }
    }
  }

  const std::string& text_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> EncodeNpy(const NDArray& array) {
  if (array.is_none()) return absl::InvalidArgumentError("EncodeNpy: a none array");
  const char* descr = NpyDescr(array.dtype());
  if (descr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeNpy: NumPy has no ", DTypeName(array.dtype()), " type"));
  }
  std::string shape = absl::StrJoin(array.shape(), ", ");
  if (array.shape().ndim() == 1) shape += ",";  // a Python 1-tuple
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces so that magic + version + length + header (ending in '\n') is a multiple
  // of 64, which keeps the data aligned for memory-mapping readers.
  const size_t prefix = kNpyMagicLen + 2 + 2;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff) return absl::InvalidArgumentError("EncodeNpy: header too long");
  std::string out(kNpyMagic, kNpyMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  RETURN_IF_ERROR(serialization_internal::AppendArrayData(array, &out));
  return out;
}

absl::StatusOr<NDArray> DecodeNpy(const Runtime& rt, const std::string& bytes,
                                  const std::string& source, Context ctx) {
  if (bytes.size() < kNpyMagicLen + 2 || std::memcmp(bytes.data(), kNpyMagic, kNpyMagicLen) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a .npy file (no \\x93NUMPY magic)"));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  size_t len_bytes;
  if (major == 1 && minor == 0) {
    len_bytes = 2;
  } else if ((major == 2 || major == 3) && minor == 0) {
    len_bytes = 4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": .npy version ", major, ".", minor, " is not supported"));
  }
  const size_t header_at = kNpyMagicLen + 2 + len_bytes;
  if (bytes.size() < header_at) {
    return absl::DataLossError(absl::StrCat(source, ": truncated .npy header length"));
  }
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  if (bytes.size() - header_at < header_len) {
    return absl::DataLossError(absl::StrCat(source, ": truncated .npy header (", header_len,
                                            " bytes announced, ", bytes.size() - header_at,
                                            " present)"));
  }
  const std::string header_text = bytes.substr(header_at, header_len);
  ASSIGN_OR_RETURN(HeaderParser::Header header, HeaderParser(header_text, source).Parse());
  ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(header.descr, source));
  if (header.fortran_order) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": fortran_order True (column-major) .npy files are not supported; save with "
                     "numpy.ascontiguousarray"));
  }
  Shape shape = header.shape.empty() ? Shape{1} : Shape(header.shape.begin(), header.shape.end());
  if (shape.ndim() > kMaxSerializedDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": .npy shape ", shape.ToString(), " has too many dimensions"));
  }
  absl::StatusOr<size_t> nbytes = serialization_internal::CheckedByteSize(shape.dims(), dtype);
  if (!nbytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": .npy shape ", shape.ToString(),
                                                   " not supported: ", nbytes.status().message(),
                                                   " (zero-size arrays are not supported)"));
  }
  const size_t data_at = header_at + header_len;
  if (bytes.size() - data_at != *nbytes) {
    return absl::DataLossError(absl::StrCat(source, ": .npy data of ", DTypeName(dtype), " ",
                                            shape.ToString(), " needs ", *nbytes,
                                            " bytes, file has ", bytes.size() - data_at));
  }
  return serialization_internal::ArrayFromBytes(rt, shape, dtype, bytes.data() + data_at, ctx);
}

absl::Status SaveNpy(const std::string& path, const NDArray& array) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeNpy(array));
  return serialization_internal::WriteFile(path, bytes);
}

absl::StatusOr<NDArray> LoadNpy(const Runtime& rt, const std::string& path, Context ctx) {
  ASSIGN_OR_RETURN(std::string bytes, serialization_internal::ReadFile(path));
  return DecodeNpy(rt, bytes, path, ctx);
}

}  // namespace tessera
