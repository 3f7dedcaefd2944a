#include "ndarray/ndarray.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "engine/storage.h"
#include "spdlog/spdlog.h"

namespace tessera {

// The memory and engine variable every view of one allocation shares. Owned by the
// NDArrays referring to it (shared_ptr); immutable after construction.
struct NDArray::Chunk {
  Runtime rt;
  engine::StorageHandle handle;
  engine::VarHandle var;
  Context ctx;

  Chunk(const Runtime& rt, engine::StorageHandle handle, engine::VarHandle var, Context ctx)
      : rt(rt), handle(handle), var(var), ctx(ctx) {}
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  // The memory may still be in use by functions already pushed, so it is freed by the
  // engine once they have run, not here.
  ~Chunk() {
    engine::Storage* storage = rt.storage;
    const engine::StorageHandle h = handle;
    absl::Status s = rt.engine->DeleteVariable(
        [storage, h](engine::RunContext) {
          storage->Free(h);
          return absl::OkStatus();
        },
        ctx, var);
    if (!s.ok()) {
      // The engine rejected the variable (a bug elsewhere); nothing can be running on it
      // that the engine knows of, but freeing memory some stray function might still use
      // is worse than leaking it.
      spdlog::error("NDArray: deleting the variable of a {}-byte chunk on {}: {}; leaking it",
                    h.size, ctx.ToString(), std::string(s.message()));
    }
  }
};

namespace {

// Whether host code may touch memory of `ctx` directly.
bool IsHostContext(Context ctx) { return !ctx.is_gpu(); }

// Copies `bytes` between host memory and the array memory `blob` (host or device) inside
// an engine function. `to_array` picks the direction.
absl::Status CopyHostArray(engine::RunContext rctx, const TBlob& blob, void* host, size_t bytes,
                           bool to_array) {
  if (IsHostContext(blob.ctx)) {
    if (to_array) {
      std::memcpy(blob.dptr, host, bytes);
    } else {
      std::memcpy(host, blob.dptr, bytes);
    }
    return absl::OkStatus();
  }
#if TESSERA_USE_CUDA
  cudaStream_t stream = rctx.get_stream<cudaStream_t>();
  if (to_array) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(blob.dptr, host, bytes, cudaMemcpyHostToDevice, stream));
  } else {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, blob.dptr, bytes, cudaMemcpyDeviceToHost, stream));
  }
  // The host buffer belongs to a caller that returns as soon as we do.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
#else
  (void)rctx;
  return absl::FailedPreconditionError(absl::StrCat("NDArray: array on ", blob.ctx.ToString(),
                                                    " but Tessera was built without CUDA"));
#endif
}

}  // namespace

absl::StatusOr<NDArray> NDArray::Empty(const Runtime& rt, const Shape& shape, Context ctx,
                                       DType dtype) {
  if (rt.engine == nullptr || rt.storage == nullptr) {
    return absl::InvalidArgumentError("NDArray::Empty: runtime without engine or storage");
  }
  if (!shape.is_known()) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::Empty: shape ", shape.ToString(),
                                                   " is not a known shape (every dimension >= 1)"));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("NDArray::Empty: negative dimension in shape ", shape.ToString()));
    }
  }
  if (!IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("NDArray::Empty: invalid dtype ", static_cast<int>(dtype)));
  }
  // Guard the byte count against overflow before Storage sees it.
  const size_t elem = DTypeSize(dtype);
  size_t elements = 1;
  for (int64_t d : shape) {
    if (static_cast<uint64_t>(d) > engine::kStorageMaxBytes / elem / elements) {
      return absl::ResourceExhaustedError(absl::StrCat("NDArray::Empty: shape ", shape.ToString(),
                                                       " of ", DTypeName(dtype), " is too large"));
    }
    elements *= static_cast<size_t>(d);
  }
  ASSIGN_OR_RETURN(engine::StorageHandle handle, rt.storage->Alloc(elements * elem, ctx));
  const engine::VarHandle var = rt.engine->NewVariable();
  NDArray out;
  out.chunk_ = std::make_shared<Chunk>(rt, handle, var, ctx);
  out.shape_ = shape;
  out.dtype_ = dtype;
  out.offset_ = 0;
  return out;
}

Context NDArray::ctx() const {
  TESSERA_CHECK(chunk_ != nullptr);
  return chunk_->ctx;
}

engine::VarHandle NDArray::var() const {
  TESSERA_CHECK(chunk_ != nullptr);
  return chunk_->var;
}

const Runtime& NDArray::runtime() const {
  TESSERA_CHECK(chunk_ != nullptr);
  return chunk_->rt;
}

TBlob NDArray::data() const {
  TESSERA_CHECK(chunk_ != nullptr);
  char* base = static_cast<char*>(chunk_->handle.dptr);
  return TBlob(base + offset_ * static_cast<int64_t>(DTypeSize(dtype_)), shape_, dtype_,
               chunk_->ctx);
}

absl::Status NDArray::WaitToRead() const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::WaitToRead on a none array");
  return chunk_->rt.engine->WaitForVar(chunk_->var);
}

// The engine has one wait, for every pending use; a writer needs exactly that.
absl::Status NDArray::WaitToWrite() const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::WaitToWrite on a none array");
  return chunk_->rt.engine->WaitForVar(chunk_->var);
}

template <typename T>
absl::StatusOr<std::vector<T>> NDArray::AsVector() const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::AsVector on a none array");
  if (DTypeOf<T>() != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::AsVector: asked for ",
                                                   DTypeName(DTypeOf<T>()), " but the array is ",
                                                   DTypeName(dtype_)));
  }
  std::vector<T> out(static_cast<size_t>(Size()));
  RETURN_IF_ERROR(SyncCopyToCPU(out.data(), Size()));
  return out;
}

template absl::StatusOr<std::vector<float>> NDArray::AsVector<float>() const;
template absl::StatusOr<std::vector<double>> NDArray::AsVector<double>() const;
template absl::StatusOr<std::vector<Half>> NDArray::AsVector<Half>() const;
template absl::StatusOr<std::vector<BFloat16>> NDArray::AsVector<BFloat16>() const;
template absl::StatusOr<std::vector<uint8_t>> NDArray::AsVector<uint8_t>() const;
template absl::StatusOr<std::vector<int8_t>> NDArray::AsVector<int8_t>() const;
template absl::StatusOr<std::vector<int32_t>> NDArray::AsVector<int32_t>() const;
template absl::StatusOr<std::vector<int64_t>> NDArray::AsVector<int64_t>() const;

absl::Status NDArray::SyncCopyFromCPU(const void* data, int64_t num_elements) {
  if (is_none()) return absl::FailedPreconditionError("NDArray::SyncCopyFromCPU on a none array");
  if (num_elements != Size()) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::SyncCopyFromCPU: ", num_elements,
                                                   " elements given for an array of ", Size(), " ",
                                                   shape_.ToString()));
  }
  const TBlob blob = this->data();
  void* src = const_cast<void*>(data);  // only read: to_array below
  const Context c = ctx();
  RETURN_IF_ERROR(chunk_->rt.engine->PushSync(
      [blob, src](engine::RunContext rctx) {
        return CopyHostArray(rctx, blob, src, blob.Bytes(), /*to_array=*/true);
      },
      c, {}, {chunk_->var},
      c.is_gpu() ? engine::FnProperty::kCopyToGPU : engine::FnProperty::kNormal, 0,
      "SyncCopyFromCPU"));
  return WaitToRead();
}

absl::Status NDArray::SyncCopyToCPU(void* data, int64_t num_elements) const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::SyncCopyToCPU on a none array");
  if (num_elements != Size()) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::SyncCopyToCPU: room for ",
                                                   num_elements, " elements given for an array of ",
                                                   Size(), " ", shape_.ToString()));
  }
  const TBlob blob = this->data();
  const Context c = ctx();
  // Only reads the array, so concurrent readers may proceed; WaitToRead below waits for
  // every pending use of the variable, this function included.
  RETURN_IF_ERROR(chunk_->rt.engine->PushSync(
      [blob, data](engine::RunContext rctx) {
        return CopyHostArray(rctx, blob, data, blob.Bytes(), /*to_array=*/false);
      },
      c, {chunk_->var}, {},
      c.is_gpu() ? engine::FnProperty::kCopyFromGPU : engine::FnProperty::kNormal, 0,
      "SyncCopyToCPU"));
  return WaitToRead();
}

// A view of `base`'s chunk with `shape`, starting `offset` elements after base's start.
absl::StatusOr<NDArray> MakeView(const NDArray& base, Shape shape, int64_t offset) {
  NDArray out;
  out.chunk_ = base.chunk_;
  out.shape_ = std::move(shape);
  out.dtype_ = base.dtype_;
  out.offset_ = base.offset_ + offset;
  return out;
}

absl::StatusOr<NDArray> NDArray::Reshape(absl::Span<const int64_t> new_shape) const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::Reshape on a none array");
  const std::string requested = absl::StrCat("(", absl::StrJoin(new_shape, ","), ")");
  if (new_shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NDArray::Reshape: empty target shape for ", shape_.ToString()));
  }
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(new_shape.size()); ++i) {
    const int64_t d = new_shape[i];
    if (d == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("NDArray::Reshape: more than one -1 in ",
                                                       requested, " (from ", shape_.ToString(),
                                                       ")"));
      }
      infer = i;
    } else if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("NDArray::Reshape: invalid dimension ", d,
                                                     " in ", requested, " (from ",
                                                     shape_.ToString(), ")"));
    } else {
      if (known > std::numeric_limits<int64_t>::max() / d) {
        return absl::InvalidArgumentError(
            absl::StrCat("NDArray::Reshape: ", requested, " is too large"));
      }
      known *= d;
    }
  }
  Shape target(new_shape);
  if (infer >= 0) {
    if (Size() % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("NDArray::Reshape: cannot reshape ",
                                                     shape_.ToString(), " (", Size(),
                                                     " elements) to ", requested));
    }
    target[infer] = Size() / known;
  }
  if (target.Size() != Size()) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::Reshape: cannot reshape ",
                                                   shape_.ToString(), " (", Size(),
                                                   " elements) to ", requested));
  }
  return MakeView(*this, std::move(target), 0);
}

absl::StatusOr<NDArray> NDArray::Slice(int64_t begin, int64_t end) const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::Slice on a none array");
  const int64_t rows = shape_[0];
  if (begin < 0 || end > rows || begin >= end) {
    return absl::InvalidArgumentError(absl::StrCat("NDArray::Slice: rows [", begin, ", ", end,
                                                   ") out of range for shape ", shape_.ToString()));
  }
  Shape target = shape_;
  target[0] = end - begin;
  return MakeView(*this, std::move(target), begin * shape_.ProdRange(1, shape_.ndim()));
}

absl::StatusOr<NDArray> NDArray::At(int64_t index) const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::At on a none array");
  if (index < 0 || index >= shape_[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("NDArray::At: index ", index, " out of range for shape ", shape_.ToString()));
  }
  // A row of a 1-D array is a single element: Shape{1}, as shapes have >= 1 dimension.
  Shape target = shape_.ndim() == 1 ? Shape{1} : Shape(shape_.begin() + 1, shape_.end());
  return MakeView(*this, std::move(target), index * shape_.ProdRange(1, shape_.ndim()));
}

absl::StatusOr<NDArray> NDArray::ViewAs(const Shape& shape, DType dtype) const {
  if (is_none()) return absl::FailedPreconditionError("NDArray::ViewAs on a none array");
  if (!shape.is_known()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NDArray::ViewAs: shape ", shape.ToString(), " is not fully known"));
  }
  const int64_t start = offset_ * static_cast<int64_t>(DTypeSize(dtype_));
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t needed = shape.Size() * size;
  const int64_t available = static_cast<int64_t>(chunk_->handle.size) - start;
  if (start % size != 0 || needed > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NDArray::ViewAs: ", shape.ToString(), " ", DTypeName(dtype), " needs ", needed,
        " bytes at byte offset ", start, ", but the chunk has ", available, " from there"));
  }
  NDArray out;
  out.chunk_ = chunk_;
  out.shape_ = shape;
  out.dtype_ = dtype;
  out.offset_ = start / size;
  return out;
}

}  // namespace tessera
