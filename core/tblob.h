// TBlob: a typed, shaped view of memory someone else owns (an NDArray chunk, a buffer of the
// executor, a test's std::vector) - what operators compute on, as in mshadow. And
// OpReqType: how a kernel writes its result into an output blob.
//
// A TBlob owns nothing and is valid as long as the memory under it; it is a plain value.
// Data is dense and row-major; `ctx` says whether `dptr` is host or device memory.
#ifndef TESSERA_CORE_TBLOB_H_
#define TESSERA_CORE_TBLOB_H_

#include <cstdint>

#include "core/check.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera {

// How an output is written, for every kernel:
enum class OpReqType : int8_t {
  kNullOp = 0,        // leave the output untouched (nobody needs it)
  kWriteTo = 1,       // overwrite; the memory is not read before
  kWriteInplace = 2,  // overwrite; the memory is shared with an input (may alias)
  kAddTo = 3,         // out += result (gradient accumulation)
};

const char* OpReqTypeName(OpReqType req);

// Stores `value` into `*out` according to `req`; the one place kernels' loops do it.
template <typename T, typename V>
inline void Assign(T* out, OpReqType req, V value) {
  switch (req) {
    case OpReqType::kNullOp:
      break;
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      *out = static_cast<T>(value);
      break;
    case OpReqType::kAddTo:
      *out = static_cast<T>(static_cast<V>(static_cast<AccType<T>>(*out)) + value);
      break;
  }
}

struct TBlob {
  void* dptr = nullptr;
  Shape shape;
  DType dtype = DType::kFloat32;
  Context ctx;

  TBlob() = default;
  TBlob(void* dptr, Shape shape, DType dtype, Context ctx = Context::CPU())
      : dptr(dptr), shape(std::move(shape)), dtype(dtype), ctx(ctx) {}
  template <typename T>
  TBlob(T* data, Shape shape, Context ctx = Context::CPU())
      : dptr(data), shape(std::move(shape)), dtype(DTypeOf<T>()), ctx(ctx) {}

  int64_t Size() const { return shape.Size(); }
  int ndim() const { return shape.ndim(); }
  size_t Bytes() const { return static_cast<size_t>(shape.Size()) * DTypeSize(dtype); }

  // The data as T*; checks that T is the blob's type (a kernel dispatch bug otherwise).
  template <typename T>
  T* data() const {
    TESSERA_CHECK(DTypeOf<T>() == dtype);
    return static_cast<T*>(dptr);
  }

  // The same memory under another shape of equal size.
  TBlob Reshaped(Shape new_shape) const {
    TESSERA_CHECK(new_shape.Size() == shape.Size());
    return TBlob(dptr, std::move(new_shape), dtype, ctx);
  }
};

}  // namespace tessera

#endif  // TESSERA_CORE_TBLOB_H_
