// CUDA kernels of the operators that draw random numbers (Dropout, LeakyReLU's rrelu) and of
// the rest of LeakyReLU, behind plain launch functions. Shared by random_kernels.cu and the
// operator .cc files: no CUDA syntax beyond <cuda_runtime_api.h> types, no absl.
//
// Random numbers come from the device's Philox generator (the kRandom resource), passed by
// value at its current position: draw j of a launch is the 32-bit output at position
// gen.position() + j, which a thread computes on its own (PhiloxRandom::Block), and the
// caller then advances the host's generator past the draws used (gen->Skip), so that the
// resource's stream is consumed exactly as the CPU kernels consume it. Each draw becomes a
// uniform u in [0, 1) as PhiloxRandom::NextUniform does, so for the same generator state the
// GPU's decisions are the CPU's, bit for bit.
//
// Every launcher enqueues on `stream` and returns cudaGetLastError() of the launch; `req` is
// an OpReqType value (0 null, 1 write, 2 write in place, 3 add to). Element types are float32
// or float64 (`type`); the elementwise pointers may alias exactly (in place).
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_OPS_CUDA_RANDOM_KERNELS_H_
#define TESSERA_OPS_CUDA_RANDOM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/philox.h"
#include "ndarray/cuda/tensor_kernels.h"

namespace tessera::ops::cuda {

using ::tessera::cuda::KernelType;

// Dropout.

// Which draw each element uses: element i, at multi-index (i_0, ..., i_{ndim-1}) of `shape`,
// uses draw sum_d i_d * draw_stride[d] (0 along the axes that share one decision).
struct DrawMap {
  int ndim = 0;
  int64_t shape[::tessera::cuda::kMaxDims] = {};
  int64_t draw_stride[::tessera::cuda::kMaxDims] = {};
};

// y[i] (per y_req) = keep ? x[i] * scale : 0 and, with `mask` non-null, mask[i] = keep ? scale
// : 0 (always overwritten), where keep = u >= p for element i's draw u. n elements.
cudaError_t LaunchDropout(KernelType type, const void* x, void* y, int y_req, void* mask, int64_t n,
                          const DrawMap& map, const engine::PhiloxRandom& gen, double p,
                          double scale, cudaStream_t stream);
// No dropping: y (per y_req) = x and, with `mask` non-null, mask = 1.
cudaError_t LaunchDropoutIdentity(KernelType type, const void* x, void* y, int y_req, void* mask,
                                  int64_t n, cudaStream_t stream);

// LeakyReLU (ops/array/leaky_relu.cc), in the CPU's arithmetic for each type.
enum class LeakyKind : int { kLeaky, kElu, kPReLU, kRReLU, kSelu, kGelu };

struct LeakyArgs {
  LeakyKind kind = LeakyKind::kLeaky;
  float slope = 0.25f;
  // prelu: element i's channel is (i / inner) % channels.
  int64_t channels = 1, inner = 1;
};

// y (per req) = f(x) for every kind but rrelu; `gamma` is prelu's per-channel slope.
cudaError_t LaunchLeakyReluForward(KernelType type, const LeakyArgs& args, const void* x,
                                   const void* gamma, void* y, int req, int64_t n,
                                   cudaStream_t stream);
// rrelu: slope s_i = lower + (upper - lower) * u_i from draw i while training, else
// (lower + upper) / 2; y (per req) = x > 0 ? x : s_i * x and, with `mask` non-null,
// mask[i] = s_i (always overwritten). Draws n values from `gen` when training.
cudaError_t LaunchRReluForward(KernelType type, float lower, float upper, bool training,
                               const engine::PhiloxRandom& gen, const void* x, void* y, int req,
                               void* mask, int64_t n, cudaStream_t stream);
// dx (per req) from out_grad `og` and `s`, which is x when `s_is_input`, else y (same sign as
// x); `extra` is prelu's gamma or rrelu's mask, else unused.
cudaError_t LaunchLeakyReluBackward(KernelType type, const LeakyArgs& args, bool s_is_input,
                                    const void* og, const void* s, const void* extra, void* dx,
                                    int req, int64_t n, cudaStream_t stream);
// prelu: dgamma[c] (per req) = the sum, in double, of x * og over channel c's elements with
// x <= 0, data (outer, channels, inner).
cudaError_t LaunchPReluGammaGrad(KernelType type, const void* og, const void* x, int64_t outer,
                                 int64_t channels, int64_t inner, void* dgamma, int req,
                                 cudaStream_t stream);

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_RANDOM_KERNELS_H_
