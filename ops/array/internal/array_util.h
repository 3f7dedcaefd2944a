// Helpers shared by the array operators' CPU kernels and properties: writing a result
// according to an OpReqType for any dtype, the dtype and device checks every operator does,
// and numbered argument names (arg0, arg1, ...). Private to ops/array.
//
// Stateless functions, safe from any thread.
#ifndef TESSERA_OPS_ARRAY_INTERNAL_ARRAY_UTIL_H_
#define TESSERA_OPS_ARRAY_INTERNAL_ARRAY_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/tblob.h"
#include "ops/operator.h"

namespace tessera::ops::array_internal {

// Copies `n` elements of `in` to `out` per `req`. Writing over itself (the in-place case
// where the executor gave both sides one buffer) is skipped rather than memcpy'd, because
// memcpy on overlapping memory is undefined.
template <typename T>
void CopyWithReq(const T* in, T* out, int64_t n, OpReqType req) {
  switch (req) {
    case OpReqType::kNullOp:
      return;
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      if (in != out) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(T));
      return;
    case OpReqType::kAddTo:
      for (int64_t i = 0; i < n; ++i) {
        Assign(out + i, req, static_cast<AccType<T>>(in[i]));
      }
      return;
  }
}

// out[i] (per `req`) = f(i) for i in [0, n), with f returning AccType<T>. The switch on
// `req` is outside the loops so each loop is a plain one the compiler can vectorize; reading
// an input at i before writing out[i] keeps element-wise kernels correct in place.
template <typename T, typename F>
void MapWithReq(T* out, int64_t n, OpReqType req, F f) {
  switch (req) {
    case OpReqType::kNullOp:
      return;
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(f(i));
      return;
    case OpReqType::kAddTo:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<T>(static_cast<AccType<T>>(out[i]) + f(i));
      }
      return;
  }
}

// CopyWithReq over every dtype, for blobs of equal size (shapes may differ: Reshape).
absl::Status CopyBlob(const TBlob& in, const TBlob& out, OpReqType req, absl::string_view op);

// Writes zeros per `req` (adding zero is nothing to do). All-zero bits are 0 in every dtype.
void ZeroBlob(const TBlob& out, OpReqType req);

// "<op>: unsupported dtype int32 (this operator supports ...)".
absl::Status UnsupportedDType(absl::string_view op, DType dtype, bool float_only);

// The default type inference (all one type), then INVALID_ARGUMENT when that type is not a
// floating-point one: operators whose kernels exist only for float types say so at bind
// time instead of at the first Forward.
absl::StatusOr<bool> InferFloatType(const OperatorProperty& prop, std::vector<DType>* in_type,
                                    std::vector<DType>* out_type, std::vector<DType>* aux_type);

// UNIMPLEMENTED naming the operator and device for anything but a CPU context.
absl::Status CheckCpu(absl::string_view op, Context ctx);

// {prefix0, prefix1, ..., prefix<n-1>}.
std::vector<std::string> NumberedNames(absl::string_view prefix, int n);

}  // namespace tessera::ops::array_internal

#endif  // TESSERA_OPS_ARRAY_INTERNAL_ARRAY_UTIL_H_
