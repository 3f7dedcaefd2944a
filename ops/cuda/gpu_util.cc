// Handle cache, workspace and descriptor helpers of ops/cuda (see gpu_util.h).
#include "ops/cuda/gpu_util.h"

#include <climits>
#include <cstdlib>
#include <string>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/cuda_status.h"
#include "engine/resource.h"
#include "ops/cuda/cublas_status.h"
#include "ops/cuda/cudnn_status.h"

namespace tessera::ops::cuda {
namespace {

using HandleKey = std::pair<int, cudaStream_t>;

// Process-wide on purpose: handles are per device and stream, not per operator, and the
// engine's RunContext carries only the stream. Never destroyed: destroying at exit would race
// with the CUDA runtime's own teardown.
struct HandleCache {
  absl::Mutex mu;
  std::map<HandleKey, cudnnHandle_t> cudnn ABSL_GUARDED_BY(mu);
  std::map<HandleKey, cublasHandle_t> cublas ABSL_GUARDED_BY(mu);
};

HandleCache& Cache() {
  static auto* cache = new HandleCache;
  return *cache;
}

absl::StatusOr<HandleKey> KeyOf(const OpContext& ctx) {
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return HandleKey(device, StreamOf(ctx));
}

}  // namespace

bool AllowTf32() {
  static const bool allow = [] {
    const char* value = std::getenv("TESSERA_ALLOW_TF32");
    return value != nullptr && std::string(value) == "1";
  }();
  return allow;
}

absl::StatusOr<cudnnHandle_t> CudnnHandle(const OpContext& ctx) {
  absl::StatusOr<HandleKey> key = KeyOf(ctx);
  if (!key.ok()) return key.status();
  HandleCache& cache = Cache();
  absl::MutexLock lock(&cache.mu);
  auto it = cache.cudnn.find(*key);
  if (it == cache.cudnn.end()) {
    cudnnHandle_t handle = nullptr;
    CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
    it = cache.cudnn.emplace(*key, handle).first;
  }
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(it->second, key->second));
  return it->second;
}

absl::StatusOr<cublasHandle_t> CublasHandle(const OpContext& ctx) {
  absl::StatusOr<HandleKey> key = KeyOf(ctx);
  if (!key.ok()) return key.status();
  HandleCache& cache = Cache();
  absl::MutexLock lock(&cache.mu);
  auto it = cache.cublas.find(*key);
  if (it == cache.cublas.end()) {
    cublasHandle_t handle = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
    // Plain FP32 math unless TF32 is allowed (AllowTf32 says why).
    CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
        handle, AllowTf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    it = cache.cublas.emplace(*key, handle).first;
  }
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(it->second, key->second));
  return it->second;
}

Workspace::~Workspace() {
  // A failure here cannot be reported; the allocation is lost at worst.
  if (owned_ != nullptr) cudaFreeAsync(owned_, StreamOf(ctx_));
}

absl::StatusOr<void*> Workspace::Get(size_t bytes) {
  if (bytes == 0) return nullptr;
  for (const engine::Resource& r : ctx_.requested) {
    if (r.type == engine::ResourceRequest::kTempSpace && r.ctx.is_gpu()) {
      return r.get_space(bytes, StreamOf(ctx_));
    }
  }
  if (owned_ != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaFreeAsync(owned_, StreamOf(ctx_)));
    owned_ = nullptr;
  }
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(&owned_, bytes, StreamOf(ctx_)));
  return owned_;
}

absl::Status CheckFloat32(const std::string& op, const std::vector<TBlob>& blobs) {
  for (const TBlob& b : blobs) {
    // Blobs Backward did not declare a dependency on arrive empty.
    if (b.dptr == nullptr) continue;
    if (b.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": the GPU kernel supports float32 only, got ", DTypeName(b.dtype)));
    }
    if (!b.ctx.is_gpu()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": GPU kernel got a blob on ", b.ctx.ToString()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> IntDims(const std::string& op, const Shape& shape) {
  std::vector<int> dims;
  for (int64_t d : shape) {
    if (d > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dimension ", d, " of ", shape.ToString(), " is too large for cuDNN"));
    }
    dims.push_back(static_cast<int>(d));
  }
  return dims;
}

absl::Status SetTensorDesc(TensorDesc* desc, std::vector<int> dims) {
  while (dims.size() < 4) dims.push_back(1);
  std::vector<int> strides(dims.size());
  int stride = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= dims[i];
  }
  if (desc->get() == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(desc->out()));
  CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(
      desc->get(), CUDNN_DATA_FLOAT, static_cast<int>(dims.size()), dims.data(), strides.data()));
  return absl::OkStatus();
}

}  // namespace tessera::ops::cuda
