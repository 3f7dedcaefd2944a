#include "ops/array/internal/array_util.h"

#include "absl/strings/str_cat.h"

namespace tessera::ops::array_internal {

absl::Status CopyBlob(const TBlob& in, const TBlob& out, OpReqType req, absl::string_view op) {
  if (in.Size() != out.Size()) {
    return absl::InternalError(absl::StrCat(op, ": copy between blobs of different sizes ",
                                            in.shape.ToString(), " and ", out.shape.ToString()));
  }
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(in.dtype, T, CopyWithReq(in.data<T>(), out.data<T>(), in.Size(), req),
                      status = UnsupportedDType(op, in.dtype, /*float_only=*/false));
  return status;
}

void ZeroBlob(const TBlob& out, OpReqType req) {
  if (req == OpReqType::kWriteTo || req == OpReqType::kWriteInplace) {
    std::memset(out.dptr, 0, out.Bytes());
  }
}

absl::Status UnsupportedDType(absl::string_view op, DType dtype, bool float_only) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": unsupported dtype ", DTypeName(dtype),
                   float_only ? " (supported: float32, float64, float16, bfloat16)" : ""));
}

absl::StatusOr<bool> InferFloatType(const OperatorProperty& prop, std::vector<DType>* in_type,
                                    std::vector<DType>* out_type, std::vector<DType>* aux_type) {
  absl::StatusOr<bool> known = prop.OperatorProperty::InferType(in_type, out_type, aux_type);
  if (!known.ok() || !*known) return known;
  const DType dtype = in_type->empty() ? out_type->front() : in_type->front();
  if (!IsFloatingPoint(dtype)) return UnsupportedDType(prop.TypeString(), dtype, true);
  return true;
}

absl::Status CheckCpu(absl::string_view op, Context ctx) {
  if (ctx.type == DeviceType::kGPU) {
    return absl::UnimplementedError(absl::StrCat(op, ": no kernel for ", ctx.ToString()));
  }
  return absl::OkStatus();
}

std::vector<std::string> NumberedNames(absl::string_view prefix, int n) {
  std::vector<std::string> names;
  names.reserve(n);
  for (int i = 0; i < n; ++i) names.push_back(absl::StrCat(prefix, i));
  return names;
}

}  // namespace tessera::ops::array_internal
