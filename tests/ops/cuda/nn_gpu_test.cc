// The cuDNN / cuBLAS operators (Convolution, FullyConnected, Pooling, Activation, BatchNorm,
// softmax, log_softmax) against the oneDNN CPU operators, float32. Tolerances allow for
// different summation orders over up to a few hundred terms.
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
