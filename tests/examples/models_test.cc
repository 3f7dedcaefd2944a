// The networks of examples/models.h: ResNet18Cifar's shapes and exact parameter count
// (derived by hand below from the architecture, the same count PyTorch's CIFAR ResNet-18
// reports), and one CPU training step through Module with finite, non-trivial gradients;
// BuiltinModel's names.
#include "examples/models.h"

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/ndarray/test_util.h"
#include "train/initializer.h"
#include "train/module.h"

namespace tessera::examples {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

// Trained parameters of ResNet18Cifar(10), by hand. Convolutions have no bias; each
// BatchNorm of C channels has gamma and beta (2C; its moving mean and variance are auxiliary
// states, not parameters).
//   stem: conv 3->64 3x3 = 1,728; bn 128                                    =     1,856
//   stage 1, 2 blocks of (conv 64->64 3x3 = 36,864 + bn 128) x 2 = 73,984   =   147,968
//   stage 2, block 1: conv 64->128 3x3 73,728 + conv 128->128 3x3 147,456
//            + shortcut 1x1 64->128 8,192 + 3 bn x 256                      =   230,144
//            block 2: 2 x (147,456 + 256)                                   =   295,424
//   stage 3, block 1: 294,912 + 589,824 + 32,768 + 3 x 512                  =   919,040
//            block 2: 2 x (589,824 + 512)                                   = 1,180,672
//   stage 4, block 1: 1,179,648 + 2,359,296 + 131,072 + 3 x 1,024           = 3,673,088
//            block 2: 2 x (2,359,296 + 1,024)                               = 4,720,640
//   fc 512->10: 5,120 + bias 10                                             =     5,130
//   total                                                                   = 11,173,962
constexpr int64_t kResNet18CifarParams = 11'173'962;
// Moving mean + variance over the BatchNorm channels: 64 + 4 x 64 + 5 x 128 + 5 x 256 +
// 5 x 512 = 4,800 channels.
constexpr int64_t kResNet18CifarAux = 9'600;

bool IsInput(const std::string& name) { return name == "data" || name == "softmax_label"; }

class ResNet18CifarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    auto net = ResNet18Cifar();
    ASSERT_THAT(net.status(), IsOk());
    net_ = *net;
  }
  const Runtime& rt() const { return owned_->get(); }

  std::unique_ptr<OwnedRuntime> owned_;
  graph::Symbol net_;
};

TEST_F(ResNet18CifarTest, BindsForCifarBatchesWithTheExpectedShapesAndParameterCount) {
  graph::SimpleBindOptions bind{
      .shapes = {{"data", Shape{2, 3, 32, 32}}, {"softmax_label", Shape{2}}}};
  auto exec = graph::Executor::SimpleBind(rt(), net_, Context::CPU(), bind);
  ASSERT_THAT(exec.status(), IsOk());
  ASSERT_EQ((*exec)->outputs().size(), 1u);
  EXPECT_EQ((*exec)->outputs()[0].shape(), (Shape{2, 10}));

  const std::map<std::string, NDArray> args = (*exec)->arg_dict();
  int64_t params = 0;
  for (const auto& [name, array] : args) {
    if (!IsInput(name)) params += array.Size();
  }
  EXPECT_EQ(params, kResNet18CifarParams);
  int64_t aux = 0;
  for (const auto& [name, array] : (*exec)->aux_dict()) aux += array.Size();
  EXPECT_EQ(aux, kResNet18CifarAux);

  // The architecture's landmarks: stem, the first projection shortcut, the head.
  EXPECT_EQ(args.at("conv0_weight").shape(), (Shape{64, 3, 3, 3}));
  EXPECT_EQ(args.count("conv0_bias"), 0u) << "BatchNorm follows: convolutions have no bias";
  EXPECT_EQ(args.count("stage1_unit1_conv1sc_weight"), 0u) << "stage 1 keeps 64 channels";
  EXPECT_EQ(args.at("stage2_unit1_conv1_weight").shape(), (Shape{128, 64, 3, 3}));
  EXPECT_EQ(args.at("stage2_unit1_conv1sc_weight").shape(), (Shape{128, 64, 1, 1}));
  EXPECT_EQ(args.count("stage2_unit2_conv1sc_weight"), 0u);
  EXPECT_EQ(args.at("stage4_unit2_conv2_weight").shape(), (Shape{512, 512, 3, 3}));
  EXPECT_EQ(args.at("fc1_weight").shape(), (Shape{10, 512}));
  EXPECT_EQ(args.at("fc1_bias").shape(), (Shape{10}));
}

TEST_F(ResNet18CifarTest, OneTrainingStepOnTheCpuGivesFiniteGradients) {
  train::Module mod(rt(), net_);
  ASSERT_THAT(mod.Bind({{"data", Shape{2, 3, 32, 32}}}, {{"softmax_label", Shape{2}}}), IsOk());
  ASSERT_THAT(mod.InitParams(train::Xavier()), IsOk());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::vector<float> x(2 * 3 * 32 * 32);
  for (float& v : x) v = pixel(rng);
  auto data = FromVector<float>(rt(), Shape{2, 3, 32, 32}, x);
  auto label = FromVector<float>(rt(), Shape{2}, std::vector<float>{3, 7});
  ASSERT_TRUE(data.ok() && label.ok());
  ASSERT_THAT(mod.Forward({{*data}, {*label}}, /*is_train=*/true), IsOk());
  ASSERT_THAT(mod.Backward(), IsOk());

  const graph::Executor& exec = *mod.executors()[0];
  auto probs = exec.outputs()[0].AsVector<float>();
  ASSERT_THAT(probs.status(), IsOk());
  for (int row = 0; row < 2; ++row) {
    double sum = 0;
    for (int c = 0; c < 10; ++c) sum += (*probs)[row * 10 + c];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "softmax row " << row;
  }

  const std::map<std::string, NDArray> grads = exec.grad_dict();
  int checked = 0;
  for (const auto& [name, grad] : grads) {
    if (IsInput(name) || grad.is_none()) continue;
    auto g = grad.AsVector<float>();
    ASSERT_THAT(g.status(), IsOk()) << name;
    for (size_t i = 0; i < g->size(); ++i) {
      ASSERT_TRUE(std::isfinite((*g)[i])) << name << "[" << i << "] = " << (*g)[i];
    }
    ++checked;
  }
  // Every parameter has a gradient: 20 convolutions (17 3x3 + 3 shortcuts), 20 BatchNorms
  // (gamma, beta), fc1 weight and bias.
  EXPECT_EQ(checked, 20 + 2 * 20 + 2);

  // SoftmaxOutput's gradient is softmax - one_hot per sample, whose classes sum to zero, so
  // fc1_bias's gradient sums to zero; it is not zero itself (the labels are not the argmax of
  // two random predictions, and even if they were, p < 1).
  auto bias_grad = grads.at("fc1_bias").AsVector<float>();
  ASSERT_THAT(bias_grad.status(), IsOk());
  double sum = 0, largest = 0;
  for (float v : *bias_grad) sum += v, largest = std::max(largest, std::abs(double{v}));
  EXPECT_NEAR(sum, 0.0, 1e-5);
  EXPECT_GT(largest, 1e-3);
  // The gradient reaches the stem through all eight blocks.
  auto stem_grad = grads.at("conv0_weight").AsVector<float>();
  ASSERT_THAT(stem_grad.status(), IsOk());
  double stem_norm = 0;
  for (float v : *stem_grad) stem_norm += double{v} * v;
  EXPECT_GT(stem_norm, 0.0);
}

TEST(BuiltinModelTest, NamesResNet18Cifar) {
  EXPECT_THAT(BuiltinModelNames(), Contains("resnet18_cifar"));
  auto net = BuiltinModel("resnet18_cifar");
  ASSERT_THAT(net.status(), IsOk());
  auto direct = ResNet18Cifar();
  ASSERT_THAT(direct.status(), IsOk());
  EXPECT_EQ(net->ListArguments(), direct->ListArguments());
  EXPECT_THAT(BuiltinModel("resnet").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("resnet18_cifar")));
}

int64_t ParameterCount(const std::vector<std::pair<std::string, Shape>>& params) {
  int64_t count = 0;
  for (const auto& [name, shape] : params) count += shape.Size();
  return count;
}

// The counts torchvision's resnet50 and vgg16 report for 1,000 classes (MXNet's networks have
// the same layers).
TEST(ParameterShapesTest, ResNet50HasTorchvisionsParameterCount) {
  auto net = ResNet50();
  ASSERT_THAT(net.status(), IsOk());
  auto params = ParameterShapes(*net, {{"data", Shape{1, 3, 224, 224}}});
  ASSERT_THAT(params.status(), IsOk());
  EXPECT_EQ(ParameterCount(*params), 25'557'032);
  // conv0, bn0's gamma and beta, 16 blocks of 3 convs and 3 BatchNorms, 4 projections with
  // their BatchNorm, fc1's weight and bias.
  EXPECT_EQ(params->size(), 3u + 16 * 9 + 4 * 3 + 2);
  EXPECT_EQ(params->front().first, "conv0_weight");
  EXPECT_EQ(params->back().second, (Shape{1000}));
}

TEST(ParameterShapesTest, Vgg16HasTorchvisionsParameterCount) {
  auto net = Vgg16();
  ASSERT_THAT(net.status(), IsOk());
  auto params = ParameterShapes(*net, {{"data", Shape{1, 3, 224, 224}}});
  ASSERT_THAT(params.status(), IsOk());
  EXPECT_EQ(ParameterCount(*params), 138'357'544);
  EXPECT_EQ(params->size(), 2u * 16);
}

TEST(ParameterShapesTest, TheEmbeddingTableDominatesTheEmbeddingMlp) {
  auto net = EmbeddingMlp();
  ASSERT_THAT(net.status(), IsOk());
  auto params = ParameterShapes(*net, {{"data", Shape{1, 16}}});
  ASSERT_THAT(params.status(), IsOk());
  // 1,000,000 x 32 table; fc1 512 -> 256, fc2 256 -> 128, fc3 128 -> 2, with biases.
  EXPECT_EQ(ParameterCount(*params), 32'000'000 + 512 * 256 + 256 + 256 * 128 + 128 + 128 * 2 + 2);
  EXPECT_EQ(params->front(), (std::pair<std::string, Shape>{"embed_weight", Shape{1000000, 32}}));
}

TEST(ParameterFlopsTest, LeNetsLayersAtBatchTwo) {
  auto net = LeNet();
  ASSERT_THAT(net.status(), IsOk());
  auto flops = ParameterFlops(*net, {{"data", Shape{2, 1, 28, 28}}});
  ASSERT_THAT(flops.status(), IsOk());
  // conv1 20x1x5x5 at 2x24x24 positions, its bias over 2x20x24x24 outputs; conv2 50x20x5x5 at
  // 2x8x8; fc1 500x800 and fc2 10x500 per sample.
  EXPECT_EQ(*flops, (std::vector<double>{2.0 * 500 * 2 * 576, 2.0 * 20 * 576, 2.0 * 25000 * 2 * 64,
                                         2.0 * 50 * 64, 2.0 * 400000 * 2, 2.0 * 500, 2.0 * 5000 * 2,
                                         2.0 * 10}));
}

TEST(ParameterFlopsTest, ResNet50IsFourGigaMultiplyAddsAndMostAreInItsConvolutions) {
  auto net = ResNet50();
  ASSERT_THAT(net.status(), IsOk());
  const std::map<std::string, Shape> inputs = {{"data", Shape{1, 3, 224, 224}}};
  auto flops = ParameterFlops(*net, inputs);
  auto params = ParameterShapes(*net, inputs);
  ASSERT_THAT(flops.status(), IsOk());
  ASSERT_THAT(params.status(), IsOk());
  double weights = 0, total = 0;
  for (size_t i = 0; i < flops->size(); ++i) {
    total += (*flops)[i];
    if (absl::EndsWith((*params)[i].first, "_weight")) weights += (*flops)[i];
  }
  // torchvision's figure: 4.09 G multiply-adds per 224x224 image.
  EXPECT_NEAR(weights / 2, 4.09e9, 0.05e9);
  EXPECT_GT(weights / total, 0.99);
}

TEST(ParameterShapesTest, AnInputWithoutAShapeIsNamed) {
  auto net = LeNet();
  ASSERT_THAT(net.status(), IsOk());
  EXPECT_THAT(ParameterShapes(*net, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("argument 'data'")));
}

}  // namespace
}  // namespace tessera::examples
