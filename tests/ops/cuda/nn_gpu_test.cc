// The cuDNN / cuBLAS operators (Convolution, Deconvolution, FullyConnected, Pooling, Activation,
// BatchNorm, softmax, log_softmax, SoftmaxOutput) and the own kernels beside them (softsign,
// lp and 'full' pooling, SoftmaxOutput's gradient) against the oneDNN CPU operators, float32
// (the only type of these CPU operators). Tolerances: 1e-4 where cuDNN's convolutions and
// reductions sum up to a few hundred terms in another order; 1e-5 relative / 1e-6 absolute
// where both sides compute the same few operations and differ only by a library function's
// last bits (exp in softmax, pow / cbrt in lp pooling) or a short sum's order (pooling windows
// of at most 9 elements); 1e-6 / 1e-7 for softsign, exact IEEE arithmetic on both sides (only
// kAddTo's fused multiply-add can differ in the last bit).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/ops/cuda/gpu_checker.h"

namespace tessera::ops::testing {
namespace {

struct NnCase {
  std::string name;  // test name
  GpuCase c;
};

std::vector<NnCase> Cases() {
  auto make = [](std::string name, std::string op, KwArgs kwargs, std::vector<Shape> shapes,
                 bool is_train = true) {
    GpuCase c;
    c.op = std::move(op);
    c.kwargs = std::move(kwargs);
    c.in_shapes = std::move(shapes);
    c.is_train = is_train;
    c.rtol = 1e-4;
    c.atol = 1e-4;
    return NnCase{std::move(name), std::move(c)};
  };
  // Same arithmetic on both sides up to a library function or a short sum (file comment).
  auto close = [&make](std::string name, std::string op, KwArgs kwargs, std::vector<Shape> shapes) {
    NnCase n = make(std::move(name), std::move(op), std::move(kwargs), std::move(shapes));
    n.c.rtol = 1e-5;
    n.c.atol = 1e-6;
    return n;
  };
  // SoftmaxOutput: input 1 holds class labels in [0, classes).
  auto softmax_output = [&close](std::string name, KwArgs kwargs, Shape data, Shape label,
                                 int classes) {
    NnCase n = close(std::move(name), "SoftmaxOutput", std::move(kwargs), {data, label});
    n.c.integer_inputs = {{1, classes}};
    return n;
  };
  // lp pooling with p > 2 on positive data: (x / y)^(p-1) stays below 1, so the gradient's
  // sums cannot cancel into a value far smaller than their terms.
  auto positive = [](NnCase n) {
    n.c.positive = true;
    return n;
  };
  return {
      make("FullyConnected", "FullyConnected", {{"num_hidden", "5"}}, {{4, 3, 2}}),
      make("FullyConnectedNoBias", "FullyConnected", {{"num_hidden", "7"}, {"no_bias", "true"}},
           {{6, 9}}),
      make("FullyConnectedNoFlatten", "FullyConnected", {{"num_hidden", "3"}, {"flatten", "false"}},
           {{2, 3, 4}}),
      make("Convolution", "Convolution",
           {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"pad", "(1,1)"}}, {{2, 3, 6, 6}}),
      make("ConvolutionStrideDilate", "Convolution",
           {{"kernel", "(3,2)"}, {"num_filter", "3"}, {"stride", "(2,1)"}, {"dilate", "(1,2)"}},
           {{2, 2, 9, 8}}),
      make("ConvolutionGroupsNoBias", "Convolution",
           {{"kernel", "(1,3)"},
            {"num_filter", "4"},
            {"num_group", "2"},
            {"no_bias", "true"},
            {"pad", "(0,1)"}},
           {{3, 4, 5, 5}}),
      // Every cudnn_tune on a layer big enough for cuDNN to offer several algorithms (implicit
      // GEMM, Winograd, FFT): measured (the default), measured without a workspace limit, and
      // cuDNN's heuristics.
      make("ConvolutionTuneDefault", "Convolution",
           {{"kernel", "(3,3)"}, {"num_filter", "32"}, {"pad", "(1,1)"}}, {{8, 16, 12, 12}}),
      make("ConvolutionTuneFastest", "Convolution",
           {{"kernel", "(3,3)"}, {"num_filter", "32"}, {"pad", "(1,1)"}, {"cudnn_tune", "fastest"}},
           {{8, 16, 12, 12}}),
      make("ConvolutionTuneOff", "Convolution",
           {{"kernel", "(3,3)"}, {"num_filter", "32"}, {"pad", "(1,1)"}, {"cudnn_tune", "off"}},
           {{8, 16, 12, 12}}),
      make("DeconvolutionTuneOff", "Deconvolution",
           {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"stride", "(2,2)"}, {"cudnn_tune", "off"}},
           {{4, 16, 6, 6}}),
      make("PoolingMax", "Pooling",
           {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "max"}}, {{2, 3, 6, 6}}),
      make("PoolingMaxPadded", "Pooling",
           {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "max"}},
           {{2, 2, 7, 7}}),
      make("PoolingAvg", "Pooling",
           {{"kernel", "(3,3)"}, {"stride", "(1,1)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}},
           {{2, 3, 5, 5}}),
      make("PoolingAvgExcludePad", "Pooling",
           {{"kernel", "(3,3)"},
            {"pad", "(1,1)"},
            {"pool_type", "avg"},
            {"count_include_pad", "false"}},
           {{1, 2, 5, 4}}),
      make("PoolingSum", "Pooling", {{"kernel", "(2,2)"}, {"pool_type", "sum"}}, {{2, 2, 4, 4}}),
      make("PoolingGlobalAvg", "Pooling",
           {{"kernel", "(1,1)"}, {"global_pool", "true"}, {"pool_type", "avg"}}, {{2, 3, 4, 5}}),
      make("ActivationRelu", "Activation", {{"act_type", "relu"}}, {{4, 5, 3}}),
      make("ActivationSigmoid", "Activation", {{"act_type", "sigmoid"}}, {{4, 5, 3}}),
      make("ActivationTanh", "Activation", {{"act_type", "tanh"}}, {{4, 5, 3}}),
      make("ActivationSoftRelu", "Activation", {{"act_type", "softrelu"}}, {{4, 5, 3}}),
      make("Softmax", "softmax", {}, {{4, 7}}),
      make("SoftmaxAxis1", "softmax", {{"axis", "1"}}, {{2, 5, 3}}),
      make("LogSoftmax", "log_softmax", {}, {{4, 7}}),
      make("LogSoftmaxAxis0", "log_softmax", {{"axis", "0"}}, {{5, 3}}),
      make("BatchNorm", "BatchNorm", {{"fix_gamma", "false"}}, {{4, 3, 5, 5}}),
      make("BatchNormFixGamma", "BatchNorm", {{"fix_gamma", "true"}}, {{6, 4}}),
      make("BatchNormGlobalStats", "BatchNorm",
           {{"fix_gamma", "false"}, {"use_global_stats", "true"}}, {{3, 2, 4, 4}}),
      make("BatchNormInference", "BatchNorm", {{"fix_gamma", "false"}}, {{3, 2, 4, 4}},
           /*is_train=*/false),
      // softmax / log_softmax of x / T: scaled input on the GPU, gradient scaled by cuDNN.
      close("SoftmaxTemperature", "softmax", {{"temperature", "2"}}, {{4, 7}}),
      close("SoftmaxTemperatureAxis1", "softmax", {{"axis", "1"}, {"temperature", "0.25"}},
            {{2, 5, 3}}),
      close("LogSoftmaxTemperatureAxis0", "log_softmax", {{"axis", "0"}, {"temperature", "3"}},
            {{5, 3}}),
      // softsign: own kernels.
      [&make] {
        NnCase n =
            make("ActivationSoftSign", "Activation", {{"act_type", "softsign"}}, {{4, 5, 3}});
        n.c.rtol = 1e-6;
        n.c.atol = 1e-7;
        return n;
      }(),
      // SoftmaxOutput: every class axis, normalization, ignore and smoothing branch.
      softmax_output("SoftmaxOutput", {}, {4, 5}, {4}, 5),
      softmax_output("SoftmaxOutputFlattensTrailingAxes", {}, {3, 2, 4}, {3}, 8),
      softmax_output("SoftmaxOutputMultiOutput", {{"multi_output", "true"}}, {2, 4, 3, 2},
                     {2, 3, 2}, 4),
      softmax_output("SoftmaxOutputPreserveShape", {{"preserve_shape", "true"}}, {2, 3, 5}, {2, 3},
                     5),
      softmax_output("SoftmaxOutputPreserveShape1D", {{"preserve_shape", "true"}}, {7}, {1}, 7),
      softmax_output("SoftmaxOutputGradScaleBatch",
                     {{"grad_scale", "0.5"}, {"normalization", "batch"}}, {6, 4}, {6}, 4),
      softmax_output("SoftmaxOutputIgnoreValid",
                     {{"use_ignore", "true"}, {"ignore_label", "0"}, {"normalization", "valid"}},
                     {8, 5}, {8}, 5),
      // 'valid' counts labels != ignore_label even without use_ignore (which then zeroes none).
      softmax_output("SoftmaxOutputValidWithoutIgnore",
                     {{"ignore_label", "2"}, {"normalization", "valid"}, {"grad_scale", "3"}},
                     {8, 5}, {8}, 5),
      softmax_output("SoftmaxOutputIgnoreNull", {{"use_ignore", "true"}, {"ignore_label", "1"}},
                     {6, 3}, {6}, 3),
      softmax_output("SoftmaxOutputSmoothing", {{"smooth_alpha", "0.1"}}, {5, 6}, {5}, 6),
      softmax_output("SoftmaxOutputMultiOutputIgnoreValidSmoothing",
                     {{"multi_output", "true"},
                      {"use_ignore", "true"},
                      {"ignore_label", "3"},
                      {"normalization", "valid"},
                      {"smooth_alpha", "0.2"}},
                     {3, 4, 5}, {3, 5}, 4),
      // lp pooling (own kernels, double accumulation as the CPU), p = 1, 2, 3 and the generic
      // pow path, valid and full, padded and global.
      close("PoolingLp1", "Pooling",
            {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "1"}},
            {{2, 3, 6, 6}}),
      close("PoolingLp2Padded", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pad", "(1,1)"},
             {"pool_type", "lp"},
             {"p_value", "2"}},
            {{2, 2, 7, 7}}),
      positive(close("PoolingLp3Full", "Pooling",
                     {{"kernel", "(3,3)"},
                      {"stride", "(2,2)"},
                      {"pool_type", "lp"},
                      {"p_value", "3"},
                      {"pooling_convention", "full"}},
                     {{1, 2, 6, 6}})),
      positive(close("PoolingLp4Overlapping", "Pooling",
                     {{"kernel", "(2,3)"}, {"pool_type", "lp"}, {"p_value", "4"}}, {{1, 2, 4, 5}})),
      close("PoolingLp2Global", "Pooling",
            {{"kernel", "(1,1)"}, {"global_pool", "true"}, {"pool_type", "lp"}, {"p_value", "2"}},
            {{2, 3, 4, 5}}),
      // pooling_convention 'full': own kernels where the size rounds up (the last windows
      // hang over the input's end), cuDNN where it equals 'valid'.
      close("PoolingMaxFull", "Pooling",
            {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"}},
            {{2, 2, 6, 6}}),
      close("PoolingMaxFullPadded", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pad", "(1,1)"},
             {"pooling_convention", "full"}},
            {{1, 2, 6, 7}}),
      close("PoolingMaxFullSameAsValid", "Pooling",
            {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"}},
            {{1, 2, 6, 6}}),
      close("PoolingAvgFull", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pool_type", "avg"},
             {"pooling_convention", "full"}},
            {{2, 2, 6, 6}}),
      close("PoolingAvgFullPadded", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pad", "(1,1)"},
             {"pool_type", "avg"},
             {"pooling_convention", "full"}},
            {{1, 2, 6, 7}}),
      close("PoolingAvgFullExcludePad", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pad", "(1,1)"},
             {"pool_type", "avg"},
             {"count_include_pad", "false"},
             {"pooling_convention", "full"}},
            {{1, 2, 6, 7}}),
      close("PoolingSumFull", "Pooling",
            {{"kernel", "(2,2)"},
             {"stride", "(2,2)"},
             {"pool_type", "sum"},
             {"pooling_convention", "full"}},
            {{1, 3, 5, 5}}),
      close("PoolingSumFullPadded", "Pooling",
            {{"kernel", "(3,3)"},
             {"stride", "(2,2)"},
             {"pad", "(1,1)"},
             {"pool_type", "sum"},
             {"pooling_convention", "full"}},
            {{1, 2, 6, 7}}),
      // Deconvolution: cuDNN's backward data / forward / backward filter with x and y swapped.
      make("Deconvolution", "Deconvolution", {{"kernel", "(3,3)"}, {"num_filter", "4"}},
           {{2, 3, 5, 5}}),
      make("DeconvolutionStridePadAdjBias", "Deconvolution",
           {{"kernel", "(3,3)"},
            {"num_filter", "3"},
            {"stride", "(2,2)"},
            {"pad", "(1,1)"},
            {"adj", "(1,1)"},
            {"no_bias", "false"}},
           {{2, 2, 4, 5}}),
      make("DeconvolutionAdjBeyondPad", "Deconvolution",
           {{"kernel", "(2,3)"}, {"num_filter", "2"}, {"stride", "(3,2)"}, {"adj", "(2,1)"}},
           {{1, 2, 3, 4}}),
      make("DeconvolutionDilate", "Deconvolution",
           {{"kernel", "(2,3)"},
            {"num_filter", "2"},
            {"stride", "(1,2)"},
            {"dilate", "(2,1)"},
            {"no_bias", "false"}},
           {{1, 3, 4, 4}}),
      make("DeconvolutionGroups", "Deconvolution",
           {{"kernel", "(3,3)"},
            {"num_filter", "4"},
            {"num_group", "2"},
            {"stride", "(2,2)"},
            {"no_bias", "false"}},
           {{2, 4, 3, 3}}),
      make("DeconvolutionTargetShape", "Deconvolution",
           {{"kernel", "(4,4)"},
            {"num_filter", "3"},
            {"stride", "(2,2)"},
            {"target_shape", "(8,9)"}},
           {{1, 2, 4, 4}}),
      // Stride 1 with an odd excess: adj 1 = stride, the case run on a larger output in scratch.
      make("DeconvolutionTargetShapeStride1", "Deconvolution",
           {{"kernel", "(3,3)"},
            {"num_filter", "2"},
            {"target_shape", "(6,5)"},
            {"no_bias", "false"}},
           {{2, 2, 5, 5}}),
  };
}

class NnGpuTest : public ::testing::TestWithParam<NnCase> {};

TEST_P(NnGpuTest, AgreesWithCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  GpuCase c = GetParam().c;
  // Inference has no backward in training graphs; BatchNorm's CPU backward needs training.
  if (!c.is_train) c.backward = false;
  CheckGpuAgainstCpu(c);
}

// Runs everywhere: the case is valid and the CPU reference and GPU operator can be created.
TEST_P(NnGpuTest, CaseValidWithoutGpu) {
  GpuCase c = GetParam().c;
  if (!c.is_train) c.backward = false;
  CheckCaseWithoutGpu(c);
}

INSTANTIATE_TEST_SUITE_P(Ops, NnGpuTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<NnCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tessera::ops::testing
