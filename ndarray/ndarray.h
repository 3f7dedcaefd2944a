// NDArray: an asynchronous n-dimensional array. Every operation on it is an engine push
// that returns at once; reads and writes are ordered by the engine variable of its chunk.
//
// Representation: a shared Chunk (storage handle + engine variable + runtime) and a view
// into it (shape, dtype, element offset). Copies of an NDArray, Reshape and Slice share the
// chunk, so writes through one are seen by all, exactly as in MXNet. The chunk frees its
// storage through the engine (DeleteVariable) once the last NDArray referring to it is gone
// and every pushed use has run.
//
// Errors: misuse detectable at call time (shape or dtype mismatch, out-of-range slice,
// unknown device) is returned at once as INVALID_ARGUMENT naming both shapes/dtypes and
// nothing is pushed. A failure inside a pushed function is stored on the array's variable
// and returned by the next WaitToRead/WaitToWrite/AsVector on it.
//
// Thread safety: an NDArray value is like a shared_ptr: distinct NDArray objects may be used
// from different threads; the engine orders the work on the shared data.
#ifndef TESSERA_NDARRAY_NDARRAY_H_
#define TESSERA_NDARRAY_NDARRAY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "engine/engine.h"
#include "ndarray/runtime.h"

namespace tessera {

class NDArray {
 public:
  // The "none" array: no shape, no storage. Most operations reject it.
  NDArray() = default;

  // Uninitialized storage of `shape` on `ctx` (storage is allocated at once, so an
  // out-of-memory error is returned here, not later). INVALID_ARGUMENT for an unknown shape
  // or dtype.
  static absl::StatusOr<NDArray> Empty(const Runtime& rt, const Shape& shape,
                                       Context ctx = Context::CPU(), DType dtype = DType::kFloat32);

  bool is_none() const { return chunk_ == nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Context ctx() const;
  int64_t Size() const { return shape_.Size(); }
  // The variable guarding this array's chunk (shared by its views).
  engine::VarHandle var() const;
  const Runtime& runtime() const;
  // The view as a blob. Only dereference its pointer inside an engine function that lists
  // var() (as const or mutate), or after WaitToRead/WaitToWrite.
  TBlob data() const;

  // Block until pending writes (WaitToRead) or all pending uses (WaitToWrite) are done;
  // returns a stored failure of a function that wrote this array.
  absl::Status WaitToRead() const;
  absl::Status WaitToWrite() const;

  // The elements as T (which must be the array's dtype; INVALID_ARGUMENT naming both
  // otherwise), waiting for pending writes; GPU arrays are copied to the host.
  template <typename T>
  absl::StatusOr<std::vector<T>> AsVector() const;
  // Synchronous copies between this array and host memory of exactly Size() elements of
  // the array's dtype (INVALID_ARGUMENT naming the sizes otherwise).
  absl::Status SyncCopyFromCPU(const void* data, int64_t num_elements);
  absl::Status SyncCopyToCPU(void* data, int64_t num_elements) const;

  // Views sharing storage. Reshape: same number of elements (one dimension may be -1, as
  // NumPy); Slice: rows [begin, end) of the first dimension; At: row `index` with the first
  // dimension dropped.
  absl::StatusOr<NDArray> Reshape(absl::Span<const int64_t> new_shape) const;
  absl::StatusOr<NDArray> Slice(int64_t begin, int64_t end) const;
  absl::StatusOr<NDArray> At(int64_t index) const;
  // This view's memory reinterpreted as `shape` of `dtype` (how the graph executor carves
  // values of any type out of planned byte buffers). INVALID_ARGUMENT naming the sizes when
  // it needs more bytes than the chunk has from this view's start.
  absl::StatusOr<NDArray> ViewAs(const Shape& shape, DType dtype) const;

 private:
  struct Chunk;
  friend class NDArrayTestPeer;
  friend absl::StatusOr<NDArray> MakeView(const NDArray&, Shape, int64_t);

  std::shared_ptr<Chunk> chunk_;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  int64_t offset_ = 0;  // in elements, from the start of the chunk
};

// A new array of `shape` on `ctx` holding `values` (exactly shape.Size() of them; the dtype
// is T's). Synchronous: the values are copied before it returns.
template <typename T>
absl::StatusOr<NDArray> FromVector(const Runtime& rt, const Shape& shape,
                                   absl::Span<const T> values, Context ctx = Context::CPU()) {
  absl::StatusOr<NDArray> out = NDArray::Empty(rt, shape, ctx, DTypeOf<T>());
  if (!out.ok()) return out;
  absl::Status s = out->SyncCopyFromCPU(values.data(), static_cast<int64_t>(values.size()));
  if (!s.ok()) return s;
  return out;
}

}  // namespace tessera

#endif  // TESSERA_NDARRAY_NDARRAY_H_
