// The operator library as a whole: every operator issue #3 names is registered with a
// description, documented parameters and a consistent property; `DescribeOperators` (what
// `tessera ops` prints) covers them.
#include "ops/registry.h"

#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace tessera::ops {
namespace {

using ::tessera::testing::IsOk;
using ::testing::HasSubstr;

const std::vector<std::string>& RequiredOperators() {
  static const auto* ops = new std::vector<std::string>{
      "FullyConnected", "Convolution", "Deconvolution", "Pooling", "Activation", "LeakyReLU",
      "BatchNorm", "Dropout", "Flatten", "Reshape", "transpose", "Concat", "SliceChannel",
      "broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div", "elemwise_add",
      "elemwise_sub", "elemwise_mul", "elemwise_div", "ElementWiseSum", "Embedding", "dot",
      "batch_dot", "sum", "mean", "max", "softmax", "log_softmax", "SoftmaxOutput",
      "LinearRegressionOutput", "LogisticRegressionOutput", "MakeLoss", "BlockGrad",
      "smooth_l1"};
  return *ops;
}

TEST(RegistryTest, EveryRequiredOperatorIsRegisteredAndDescribed) {
  for (const std::string& name : RequiredOperators()) {
    SCOPED_TRACE(name);
    const OpInfo* info = OpRegistry::Global().Find(name);
    ASSERT_NE(info, nullptr) << name << " is not registered";
    EXPECT_FALSE(info->description.empty());
    std::unique_ptr<OperatorProperty> prop = info->factory();
    // Operators whose inputs or outputs are counted by a parameter have none by default.
    if (name == "Concat" || name == "ElementWiseSum" || name == "SliceChannel") {
      auto with_count = OpRegistry::Global().Create(
          name, {{name == "SliceChannel" ? "num_outputs" : "num_args", "2"}});
      ASSERT_THAT(with_count.status(), IsOk());
      prop = std::move(with_count).value();
    }
    EXPECT_EQ(prop->TypeString(), name);
    EXPECT_FALSE(prop->ListArguments().empty());
    EXPECT_GE(prop->NumOutputs(), 1);
    EXPECT_LE(prop->NumVisibleOutputs(), prop->NumOutputs());
    EXPECT_EQ(static_cast<int>(prop->ListOutputs().size()), prop->NumOutputs());
  }
}

TEST(RegistryTest, PropertiesCopyWithTheirParameters) {
  auto conv = OpRegistry::Global().Create(
      "Convolution", {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"stride", "(2,2)"}});
  ASSERT_THAT(conv.status(), IsOk());
  std::unique_ptr<OperatorProperty> copy = (*conv)->Copy();
  EXPECT_EQ(copy->GetParams(), (*conv)->GetParams());
  EXPECT_EQ(copy->GetParams().at("num_filter"), "8");
}

// Attributes as MXNet's symbol files carry them for optional parameters left unset.
TEST(RegistryTest, OperatorsTakeNoneForUnsetOptionalParameters) {
  auto conv = OpRegistry::Global().Create(
      "Convolution", {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"cudnn_tune", "None"}});
  ASSERT_THAT(conv, IsOk());
  EXPECT_EQ((*conv)->GetParams().at("cudnn_tune"), "None");  // an enum value of its own
  auto sum = OpRegistry::Global().Create("sum", {{"axis", "None"}, {"keepdims", "None"}});
  ASSERT_THAT(sum, IsOk());
  std::vector<Shape> in{Shape{2, 3}}, out(1), aux;
  ASSERT_THAT((*sum)->InferShape(&in, &out, &aux), IsOk());
  EXPECT_EQ(out[0], Shape{1});  // every axis reduced, as MXNet
}

TEST(RegistryTest, DescribeOperatorsListsEverything) {
  auto text = DescribeOperators();
  ASSERT_THAT(text.status(), IsOk());
  const std::string listing = "\n" + *text;
  for (const std::string& name : RequiredOperators()) {
    EXPECT_THAT(listing, HasSubstr("\n" + name + "\n")) << name;
  }
  auto one = DescribeOperators("Convolution");
  ASSERT_THAT(one.status(), IsOk());
  EXPECT_THAT(*one, HasSubstr("num_filter"));
  EXPECT_THAT(*one, HasSubstr("arguments: data, weight, bias"));
  EXPECT_FALSE(DescribeOperators("Convolutoin").ok());
}

}  // namespace
}  // namespace tessera::ops
