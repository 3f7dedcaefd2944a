// Convolution layouts chosen by timing (cuDNN's autotune, PyTorch's cudnn.benchmark, on the
// CPU): with TESSERA_CONV_AUTOTUNE=1 a Convolution times each of its layouts once per shape
// and thread count - the reorders from and to its plain tensors and its three primitives,
// on scratch memory - and keeps the fastest (ConvOp, conv_op.h). The choice is cached for the
// process, so every operator of one shape shares it.
//
// Off by default, for reproducibility: the layouts run different oneDNN kernels, whose sums
// come out in different orders (measured: no two of them agree bit for bit), and timings
// differ between processes, so a worker's replacement or a resumed run could choose
// otherwise than its predecessor and leave the bits of the run without faults. Without it the
// choice is a rule (ConvLayoutPolicy): the same on every run of one machine.
#ifndef TESSERA_OPS_NN_CONV_AUTOTUNE_H_
#define TESSERA_OPS_NN_CONV_AUTOTUNE_H_

#include <functional>
#include <optional>
#include <string>

#include "dnnl.hpp"

namespace tessera::ops::nn {

// Whether TESSERA_CONV_AUTOTUNE is "1" (read at each call: an operator reads it once, when
// it is made).
bool ConvAutotuneByTiming();

// The process's choices: the name of the layouts chosen for a shape's key, if timed already.
std::optional<std::string> CachedConvLayouts(const std::string& key);
void CacheConvLayouts(const std::string& key, const std::string& layouts);

// The fastest of `rounds` runs of `run` (each waits for `stream`), after one run to warm up,
// in seconds.
double BestSeconds(const std::function<void()>& run, dnnl::stream& stream, int rounds);

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_CONV_AUTOTUNE_H_
