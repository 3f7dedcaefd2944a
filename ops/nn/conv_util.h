// The 2-D window geometry shared by Convolution, Deconvolution and Pooling: MXNet's kernel /
// stride / pad / dilate tuples (empty meaning the default), the channel and layout
// parameters, and their checks. The operator behind Convolution and Deconvolution is
// ConvOp (conv_op.h).
#ifndef TESSERA_OPS_NN_CONV_UTIL_H_
#define TESSERA_OPS_NN_CONV_UTIL_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"
#include "ops/param.h"

namespace tessera::ops::nn {

// The parameter fields Convolution and Deconvolution share, in MXNet's order, for a
// parameter struct P with members of these names. The window: kernel, stride, dilate, pad.
template <typename P>
void AddConvWindowFields(ParamSchema<P>* s, const char* pad_doc) {
  s->Field("kernel", &P::kernel).Required().Lower(1).Describe("window (h, w)");
  s->Field("stride", &P::stride).Lower(1).Describe("stride (h, w); default (1, 1)");
  s->Field("dilate", &P::dilate).Lower(1).Describe("dilation (h, w); default (1, 1)");
  s->Field("pad", &P::pad).Lower(0).Describe(pad_doc);
}

// The channels and MXNet's backend fields: num_filter, num_group, no_bias, workspace and
// cudnn_tune (the GPU kernels' cuDNN workspace and algorithm search), cudnn_off (ignored).
template <typename P>
void AddConvChannelFields(ParamSchema<P>* s) {
  s->Field("num_filter", &P::num_filter).Required().Lower(1).Describe("output channels");
  s->Field("num_group", &P::num_group).Lower(1).Describe("groups of channels");
  s->Field("no_bias", &P::no_bias).Describe("whether to omit the bias");
  s->Field("workspace", &P::workspace)
      .Lower(0)
      .Describe("MB of cuDNN workspace on the GPU (oneDNN sizes its own on the CPU)");
  s->Field("cudnn_tune", &P::cudnn_tune)
      .Enum({{"None", "None"}, {"off", "off"}, {"limited_workspace", "limited_workspace"}, {"fastest", "fastest"}})
      .Describe("cuDNN algorithm choice on the GPU: measured (limited_workspace: within "
                "`workspace`; fastest) or cuDNN's heuristics (off); None: TESSERA_CUDNN_AUTOTUNE "
                "(0 off, 1 limited_workspace, the default, 2 fastest)");
  s->Field("cudnn_off", &P::cudnn_off).Describe("accepted for MXNet compatibility; ignored");
}

// MXNet's `layout` parameter (P::layout, a string) with every name MXNet 1.9 takes for
// Convolution, Deconvolution or Pooling. Only NCHW data is supported: the others are
// refused by name at Init, so a model that needs NHWC fails when it is built, not with
// wrong numbers.
template <typename P>
void AddLayoutField(ParamSchema<P>* s) {
  s->Field("layout", &P::layout)
      .Enum({{"None", "None"},
             {"NCW", "NCW"},
             {"NCHW", "NCHW"},
             {"NCDHW", "NCDHW"},
             {"NWC", "NWC"},
             {"NHWC", "NHWC"},
             {"NDHWC", "NDHWC"}})
      .SupportedOnly({"None", "NCHW"})
      .Describe("data layout (MXNet's names; None: NCHW for 2-D data)");
}

// A (h, w) tuple parameter: empty means `fallback` for both; anything but 2 values is an
// error naming the operator and parameter.
inline absl::StatusOr<std::array<int64_t, 2>> Pair2D(const Shape& value, int64_t fallback,
                                                     const std::string& op, const char* name) {
  if (value.ndim() == 0) return std::array<int64_t, 2>{fallback, fallback};
  if (value.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": parameter '", name, "' must be (h, w) for ", "2-D data, got ", value.ToString()));
  }
  return std::array<int64_t, 2>{value[0], value[1]};
}

// Output length of a convolution window sweep (floor), before checking it is positive.
inline int64_t ConvOutLength(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilate) {
  return (in + 2 * pad - (dilate * (kernel - 1) + 1)) / stride + 1;
}

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_CONV_UTIL_H_
