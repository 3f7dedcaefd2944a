// Elementwise loops for SimpleOp kernels: apply a scalar function over one, two or three
// blobs of equal size, in the blobs' floating dtype (half types computed in float), writing
// through OpReqType. The lambdas are generic (`[](auto x) { ... }`) so one definition serves
// every dtype; the loops are plain and contiguous, which the compiler vectorizes.
#ifndef TESSERA_OPS_ELEMWISE_MAP_H_
#define TESSERA_OPS_ELEMWISE_MAP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/tblob.h"

namespace tessera::ops::elemwise {

// OK when every blob is on the CPU with `out`'s dtype and size; else INVALID_ARGUMENT.
inline absl::Status CheckSameLayout(const char* op, const TBlob& out,
                                    std::initializer_list<const TBlob*> ins) {
  if (out.ctx.is_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(op, ": CPU kernel got ", out.ctx.ToString()));
  }
  for (const TBlob* in : ins) {
    if (in->dtype != out.dtype || in->Size() != out.Size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": operand ", in->shape.ToString(), " ", DTypeName(in->dtype), " does not match ",
          out.shape.ToString(), " ", DTypeName(out.dtype)));
    }
  }
  if (!IsFloatingPoint(out.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dtype ", DTypeName(out.dtype), " is not supported (floating types only)"));
  }
  return absl::OkStatus();
}

// out[i] (per req) = f(a[i]).
template <typename F>
absl::Status Map(const char* op, const TBlob& a, const TBlob& out, OpReqType req, F f) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  if (absl::Status s = CheckSameLayout(op, out, {&a}); !s.ok()) return s;
  TESSERA_FLOAT_TYPE_SWITCH(out.dtype, T, {
    using A = AccType<T>;
    const T* pa = static_cast<const T*>(a.dptr);
    T* po = static_cast<T*>(out.dptr);
    const int64_t n = out.Size();
    for (int64_t i = 0; i < n; ++i) Assign(po + i, req, static_cast<A>(f(static_cast<A>(pa[i]))));
  }, {});
  return absl::OkStatus();
}

// out[i] (per req) = f(a[i], b[i]).
template <typename F>
absl::Status Map(const char* op, const TBlob& a, const TBlob& b, const TBlob& out, OpReqType req,
                 F f) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  if (absl::Status s = CheckSameLayout(op, out, {&a, &b}); !s.ok()) return s;
  TESSERA_FLOAT_TYPE_SWITCH(out.dtype, T, {
    using A = AccType<T>;
    const T* pa = static_cast<const T*>(a.dptr);
    const T* pb = static_cast<const T*>(b.dptr);
    T* po = static_cast<T*>(out.dptr);
    const int64_t n = out.Size();
    for (int64_t i = 0; i < n; ++i) {
      Assign(po + i, req, static_cast<A>(f(static_cast<A>(pa[i]), static_cast<A>(pb[i]))));
    }
  }, {});
  return absl::OkStatus();
}

// out[i] (per req) = f(a[i], b[i], c[i]).
template <typename F>
absl::Status Map(const char* op, const TBlob& a, const TBlob& b, const TBlob& c, const TBlob& out,
                 OpReqType req, F f) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  if (absl::Status s = CheckSameLayout(op, out, {&a, &b, &c}); !s.ok()) return s;
  TESSERA_FLOAT_TYPE_SWITCH(out.dtype, T, {
    using A = AccType<T>;
    const T* pa = static_cast<const T*>(a.dptr);
    const T* pb = static_cast<const T*>(b.dptr);
    const T* pc = static_cast<const T*>(c.dptr);
    T* po = static_cast<T*>(out.dptr);
    const int64_t n = out.Size();
    for (int64_t i = 0; i < n; ++i) {
      Assign(po + i, req,
             static_cast<A>(f(static_cast<A>(pa[i]), static_cast<A>(pb[i]), static_cast<A>(pc[i]))));
    }
  }, {});
  return absl::OkStatus();
}

}  // namespace tessera::ops::elemwise

#endif  // TESSERA_OPS_ELEMWISE_MAP_H_
