// ParseCudnnTune and ChooseConvAlgorithms (see cudnn_algorithm.h).
#include "ops/cuda/cudnn_algorithm.h"

#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
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
    return v == "0" ? CudnnTune::kOff : v == "2" ? CudnnTune::kFastest : CudnnTune::kLimitedWorkspace;
  }();
  return tune;
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
  const bool measure = tune != CudnnTune::kOff;
  const size_t limit =
      tune == CudnnTune::kFastest ? std::numeric_limits<size_t>::max() : workspace_limit;
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

}  // namespace tessera::ops::cuda
