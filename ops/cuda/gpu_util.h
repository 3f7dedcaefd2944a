// Shared plumbing of the CUDA operators: the stream of a call, cached cuDNN / cuBLAS handles,
// scratch memory, typed parameter lookup from OperatorProperty::GetParams(), and RAII owners
// of cuDNN descriptors.
//
// Handles. cudnnCreate / cublasCreate cost milliseconds and allocate device memory, so one
// handle per (device, stream) is created on first use and kept for the life of the process,
// as MXNet keeps one per GPU stream. The engine gives each GPU worker its own stream, and a
// worker runs one function at a time, so a handle is never used by two threads at once; the
// stream is set on every lookup because a destroyed stream's address can be reused.
// The cache itself is guarded by a mutex and may be used from any thread.
#ifndef TESSERA_OPS_CUDA_GPU_UTIL_H_
#define TESSERA_OPS_CUDA_GPU_UTIL_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "ops/operator.h"
#include "ops/param.h"

namespace tessera::ops::cuda {

inline cudaStream_t StreamOf(const OpContext& ctx) {
  return ctx.run_ctx.get_stream<cudaStream_t>();
}

// The TF32 policy of float32 convolutions and GEMMs. Off by default: TF32 tensor cores round
// inputs to 10-bit mantissas, so results drift from the CPU kernels by ~1e-3 relative (the
// GPU tests compare float32 against the CPU with it off). TESSERA_ALLOW_TF32=1 turns it on
// for speed, as torch.backends.cuda.matmul.allow_tf32 does: cuBLAS then runs float32 GEMMs on
// TF32 tensor cores and convolutions take cuDNN's fastest algorithm whatever its math.
// Read once per process.
bool AllowTf32();

// The handles for the current device and ctx's stream, with that stream set.
absl::StatusOr<cudnnHandle_t> CudnnHandle(const OpContext& ctx);
absl::StatusOr<cublasHandle_t> CublasHandle(const OpContext& ctx);

// Scratch device memory for one call. Uses the kTempSpace resource the property requested
// when there is one (the engine serializes its users); otherwise - a property that asked for
// none, or a test driving a kernel without resources - stream-ordered cudaMallocAsync, freed
// on the same stream when the Workspace goes out of scope (so later kernels of the call may
// still use it). Not thread-safe; one per call.
class Workspace {
 public:
  explicit Workspace(const OpContext& ctx) : ctx_(ctx) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // `bytes` of device memory (null for 0), valid until the Workspace dies. Call it once per
  // call: the temp-space resource is one buffer, so a second Get may return the same memory.
  absl::StatusOr<void*> Get(size_t bytes);

 private:
  const OpContext& ctx_;
  void* owned_ = nullptr;  // from cudaMallocAsync, freed in the destructor
};

// INVALID_ARGUMENT naming op and dtype unless every blob with data is float32 on a GPU.
absl::Status CheckFloat32(const std::string& op, const std::vector<TBlob>& blobs);

// Reads typed values from a property's GetParams() map with the parameter parsers of
// ops/param.h; missing keys keep the default passed in.
class ParamReader {
 public:
  explicit ParamReader(const OperatorProperty& prop)
      : op_(prop.TypeString()), params_(prop.GetParams()) {}

  template <typename T>
  absl::Status Read(const std::string& key, T* out) const {
    auto it = params_.find(key);
    if (it == params_.end()) return absl::OkStatus();
    // Unset optional tuples print as "()" or nothing; keep the default then.
    if constexpr (std::is_same_v<T, Shape> || std::is_same_v<T, std::vector<int>>) {
      if (it->second.empty() || it->second == "()" || it->second == "[]") return absl::OkStatus();
    }
    if (std::string err = param_internal::Parse(it->second, out); !err.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_, ": parameter ", key, "='", it->second, "': ", err));
    }
    return absl::OkStatus();
  }
  std::string Get(const std::string& key, const std::string& def = "") const {
    auto it = params_.find(key);
    return it == params_.end() ? def : it->second;
  }
  const std::string& op() const { return op_; }

 private:
  std::string op_;
  std::map<std::string, std::string> params_;
};

// cuDNN's beta for an OpReqType: 1 accumulates into the output (kAddTo), 0 overwrites.
inline float BetaFor(OpReqType req) { return req == OpReqType::kAddTo ? 1.0f : 0.0f; }

// Owners of cuDNN descriptors; Create* returns the status of the create call.
template <typename T, cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  ~CudnnDescriptor() {
    if (desc_ != nullptr) Destroy(desc_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return desc_; }
  T* out() { return &desc_; }

 private:
  T desc_ = nullptr;
};
using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;
using ActDesc = CudnnDescriptor<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;

// A float32 NCHW-packed tensor descriptor of `dims` (padded with trailing 1s to 4 dims, as
// cuDNN wants at least 4).
absl::Status SetTensorDesc(TensorDesc* desc, std::vector<int> dims);
// `dims` of a shape, checking each fits an int.
absl::StatusOr<std::vector<int>> IntDims(const std::string& op, const Shape& shape);

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_GPU_UTIL_H_
