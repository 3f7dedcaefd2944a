// ParseCudnnTune and ChooseConvAlgorithms (see cudnn_algorithm.h).
#include "ops/cuda/cudnn_algorithm.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_status.h"

namespace tessera::ops::cuda {
namespace {

// Up to this many candidates per query; cuDNN 9 has 8 forward, 6 backward-data and 7
// backward-filter algorithms.
constexpr int kMaxAlgos = 16;

CudnnTune DefaultTune() {
  static const CudnnTune tune = [] {
    const char* value = std::getenv("TESSERA_CUDNN_AUTOTUNE");
    const std::string v = value == nullptr ? "1" : value;
    if (v == "0") return CudnnTune::kOff;
    return v == "2" ? CudnnTune::kFastest : CudnnTune::kLimitedWorkspace;
  }();
  return tune;
}

// What a choice depends on: the device, the tensors' and the convolution's geometry, the
// tuning mode and the limit (the TF32 policy is fixed per process).
absl::StatusOr<std::vector<int64_t>> ChoiceKey(cudnnTensorDescriptor_t x,
                                               cudnnFilterDescriptor_t w,
                                               cudnnConvolutionDescriptor_t conv,
                                               cudnnTensorDescriptor_t y, CudnnTune tune,
                                               size_t limit) {
  constexpr int kMaxDims = CUDNN_DIM_MAX;
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::vector<int64_t> key = {device, static_cast<int64_t>(tune), static_cast<int64_t>(limit)};
  for (cudnnTensorDescriptor_t t : {x, y}) {
    cudnnDataType_t type;
    int rank = 0, dims[kMaxDims], strides[kMaxDims];
    CUDNN_RETURN_IF_ERROR(cudnnGetTensorNdDescriptor(t, kMaxDims, &type, &rank, dims, strides));
    key.push_back(rank);
    key.insert(key.end(), dims, dims + rank);
    key.insert(key.end(), strides, strides + rank);
  }
  cudnnDataType_t type;
  cudnnTensorFormat_t format;
  int rank = 0, dims[kMaxDims];
  CUDNN_RETURN_IF_ERROR(cudnnGetFilterNdDescriptor(w, kMaxDims, &type, &format, &rank, dims));
  key.push_back(rank);
  key.insert(key.end(), dims, dims + rank);
  // (cuDNN refuses to report more than CUDNN_DIM_MAX - 2 spatial dimensions.)
  constexpr int kMaxSpatial = CUDNN_DIM_MAX - 2;
  int spatial = 0, pad[kMaxSpatial], stride[kMaxSpatial], dilation[kMaxSpatial], groups = 1;
  cudnnConvolutionMode_t mode;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionNdDescriptor(conv, kMaxSpatial, &spatial, pad, stride,
                                                        dilation, &mode, &type));
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionGroupCount(conv, &groups));
  key.insert(key.end(), {spatial, groups, static_cast<int64_t>(mode)});
  for (const int* values : {pad, stride, dilation}) key.insert(key.end(), values, values + spatial);
  return key;
}

// Every operator with the same convolution on the same device takes the same algorithms, as
// PyTorch's benchmark cache: two executors of one network then compute identically (a
// measured choice can differ between runs by timing noise), and each shape is measured once
// per process. Measuring holds the lock, so two measurements never time each other.
struct ChoiceCache {
  std::mutex mu;
  std::map<std::vector<int64_t>, ConvAlgorithms> choices;  // guarded by mu
};

ChoiceCache& Choices() {
  static ChoiceCache* cache = new ChoiceCache;  // never destroyed: used until exit
  return *cache;
}

// The algorithms, measured or ranked by cuDNN, each the first ChooseAlgorithm accepts.
absl::StatusOr<ConvAlgorithms> Choose(const char* op, cudnnHandle_t handle,
                                      cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                      cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y,
                                      CudnnTune tune, size_t limit) {
  const bool measure = tune != CudnnTune::kOff;
  ConvAlgorithms chosen;
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMaxAlgos];
  if (measure) {
    CUDNN_RETURN_IF_ERROR(
        cudnnFindConvolutionForwardAlgorithm(handle, x, w, conv, y, kMaxAlgos, &count, fwd));
  } else {
    CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, kMaxAlgos, &count, fwd));
  }
  ASSIGN_OR_RETURN(chosen.fwd, ChooseAlgorithm(op, "forward", fwd, count, limit));
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[kMaxAlgos];
  if (measure) {
    CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithm(handle, w, y, conv, x,
                                                                    kMaxAlgos, &count, bwd_data));
  } else {
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, y, conv, x,
                                                                      kMaxAlgos, &count, bwd_data));
  }
  ASSIGN_OR_RETURN(chosen.bwd_data, ChooseAlgorithm(op, "backward-data", bwd_data, count, limit));
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[kMaxAlgos];
  if (measure) {
    CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithm(
        handle, x, y, conv, w, kMaxAlgos, &count, bwd_filter));
  } else {
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, x, y, conv, w, kMaxAlgos, &count, bwd_filter));
  }
  ASSIGN_OR_RETURN(chosen.bwd_filter,
                   ChooseAlgorithm(op, "backward-filter", bwd_filter, count, limit));
  return chosen;
}

}  // namespace

absl::StatusOr<CudnnTune> ParseCudnnTune(const std::string& op, const std::string& value) {
  if (value.empty() || value == "None") return DefaultTune();
  if (value == "off") return CudnnTune::kOff;
  if (value == "limited_workspace") return CudnnTune::kLimitedWorkspace;
  if (value == "fastest") return CudnnTune::kFastest;
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": parameter cudnn_tune='", value, "': want None, off, limited_workspace or fastest"));
}

absl::StatusOr<ConvAlgorithms> ChooseConvAlgorithms(const char* op, cudnnHandle_t handle,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w,
                                                    cudnnConvolutionDescriptor_t conv,
                                                    cudnnTensorDescriptor_t y, CudnnTune tune,
                                                    size_t workspace_limit) {
  // Under FMA math cuDNN offers plain float32 kernels only (and an explicit TF32 policy must
  // not depend on NVIDIA_TF32_OVERRIDE).
  CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionMathType(conv, AllowTf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  const size_t limit =
      tune == CudnnTune::kFastest ? std::numeric_limits<size_t>::max() : workspace_limit;
  ASSIGN_OR_RETURN(std::vector<int64_t> key, ChoiceKey(x, w, conv, y, tune, limit));
  ChoiceCache& cache = Choices();
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.choices.find(key); it != cache.choices.end()) return it->second;
  ASSIGN_OR_RETURN(ConvAlgorithms chosen, Choose(op, handle, x, w, conv, y, tune, limit));
  cache.choices.emplace(std::move(key), chosen);
  return chosen;
}

}  // namespace tessera::ops::cuda
