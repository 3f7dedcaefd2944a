// Own CUDA kernels of the neural-network operators where cuDNN has no equivalent: the
// SoftmaxOutput loss gradient, softsign, Pooling's lp type and 'full' convention, and the
// crop / zero-pad copies Deconvolution needs when its output extends past what a symmetric
// cuDNN padding can describe. Shared by nn_kernels.cu and the operator .cc files: no CUDA
// syntax beyond <cuda_runtime_api.h> types, no absl (see kernels.h).
//
// Every launcher enqueues on `stream` and returns cudaGetLastError() of the launch; `req` is
// an OpReqType value (0 null, 1 write, 2 write in place, 3 add to) and a launcher with req 0
// does nothing. All data are float32 device pointers, dense row-major.
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_OPS_CUDA_NN_KERNELS_H_
#define TESSERA_OPS_CUDA_NN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::ops::cuda {

// SoftmaxOutput.

// *count = the number of labels[i] != value, i < n: the 'valid' normalizer, counted on the
// device so that the gradient kernel reads it without a trip through the host.
cudaError_t LaunchCountNotEqual(const float* labels, int64_t n, float value,
                                unsigned long long* count, cudaStream_t stream);

struct SoftmaxOutputGradArgs {
  int64_t outer = 0, classes = 0, inner = 0;  // prob is (outer, classes, inner)
  // grad = (prob - target) * scale, scale = grad_scale / normalizer in double rounded to
  // float. With `valid_count` (device memory, from LaunchCountNotEqual) the normalizer is
  // max(*valid_count, 1); otherwise `scale` is used as given.
  float scale = 1;
  double grad_scale = 1;
  const unsigned long long* valid_count = nullptr;
  bool use_ignore = false;
  float ignore_label = -1;
  float on_target = 1, off_target = 0;  // label smoothing
};

// grad[(o * classes + c) * inner + i] (per req) for label = labels[o * inner + i]: 0 when
// ignored, else (prob - (c == round(label) ? on_target : off_target)) * scale. A label
// outside [0, classes) that is not ignored makes the gradient of its position NaN (the CPU
// kernel reports an error there; a kernel cannot without a host read-back).
cudaError_t LaunchSoftmaxOutputGrad(const SoftmaxOutputGradArgs& args, const float* prob,
                                    const float* labels, float* grad, int req, cudaStream_t stream);

// softsign: y = x / (1 + |x|); backward dx = dy * (1 - |y|)^2 from the output (in place,
// x == y or dy == dx, allowed).
cudaError_t LaunchSoftsign(const float* x, float* y, int64_t n, int req, cudaStream_t stream);
cudaError_t LaunchSoftsignGrad(const float* dy, const float* y, float* dx, int64_t n, int req,
                               cudaStream_t stream);

// Pooling on own kernels (NCHW planes). Windows start at o * stride - pad and span kernel
// rows / columns; the elements they cover are those inside the input (padding is never
// read). max: the largest covered element, the lowest float for a window that covers none
// (as oneDNN); sum: their sum; avg with padding: the sum over the window clipped to the
// padded input's extent (MXNet's divisor under 'full'); avg without: over the count covered;
// lp: (sum x^p)^(1/p) accumulated in double. Backward gathers, per input element, over the
// windows that cover it (deterministic, no atomics): max sends the gradient to the first
// largest element of each window.
enum class PoolKind : int { kMax, kAvgIncludePad, kAvgExcludePad, kSum, kLp };

struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

// `p` is lp's power (>= 1), ignored otherwise.
cudaError_t LaunchPoolForward(PoolKind kind, int p, const PoolGeometry& g, const float* x, float* y,
                              int req, cudaStream_t stream);
// dx from dy and (for max and lp) x and y.
cudaError_t LaunchPoolBackward(PoolKind kind, int p, const PoolGeometry& g, const float* dy,
                               const float* x, const float* y, float* dx, int req,
                               cudaStream_t stream);

// Deconvolution: `big` is (planes, small_h + off_h, small_w + off_w) and `small` its
// bottom-right (planes, small_h, small_w) part.
// small (per req) = that part of big.
cudaError_t LaunchCropPlanes(const float* big, float* small, int64_t planes, int64_t small_h,
                             int64_t small_w, int64_t off_h, int64_t off_w, int req,
                             cudaStream_t stream);
// big = small in that part, zeros elsewhere (every element written).
cudaError_t LaunchZeroPadPlanes(const float* small, float* big, int64_t planes, int64_t small_h,
                                int64_t small_w, int64_t off_h, int64_t off_w, cudaStream_t stream);

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_NN_KERNELS_H_
