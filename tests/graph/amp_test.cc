// The mixed-precision pass (graph/amp.h): where the casts go, that they are shared, what
// stays float32, and converted graphs run by the executor against float32 and against a
// reference of the low-precision products' numbers.
#include "graph/amp.h"

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "core/status_matchers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "graph/indexed_graph.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "ops/nn/dnnl_util.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using tessera::testing::StatusIs;
using namespace tessera::graph::testing;  // NOLINT(build/namespaces)

Symbol Op(const std::string& op, const ops::KwArgs& params, const std::vector<SymbolInput>& inputs,
          const std::string& name) {
  auto s = Symbol::Create(op, params, inputs, name);
  TESSERA_CHECK(s.ok());
  return *s;
}

// data -> fc1 -> relu -> fc2 -> SoftmaxOutput.
Symbol Mlp() {
  Symbol data = Symbol::Variable("data"), label = Symbol::Variable("softmax_label");
  Symbol fc1 = Op("FullyConnected", {{"num_hidden", "16"}}, {data}, "fc1");
  Symbol act = Op("Activation", {{"act_type", "relu"}}, {fc1}, "relu1");
  Symbol fc2 = Op("FullyConnected", {{"num_hidden", "5"}}, {act}, "fc2");
  return Op("SoftmaxOutput", {}, {fc2, label}, "softmax");
}

// Per node name: its operator and the names of its inputs' sources.
std::map<std::string, std::pair<std::string, std::vector<std::string>>> Nodes(const Symbol& s) {
  IndexedGraph graph(s.outputs());
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> nodes;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.is_variable()) continue;
    std::vector<std::string> inputs;
    for (const NodeEntry& in : node.inputs) inputs.push_back(in.node->name);
    nodes[node.name] = {node.OpName(), inputs};
  }
  return nodes;
}

TEST(AmpPassTest, ProductsRunInTheLowTypeAndTheLossInFloat32) {
  ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(Mlp(), {.dtype = DType::kBFloat16}));
  EXPECT_EQ(amp.ListArguments(), Mlp().ListArguments());
  EXPECT_EQ(amp.ListOutputs(), Mlp().ListOutputs());
  auto nodes = Nodes(amp);
  EXPECT_THAT(nodes["fc1"].second, ElementsAre("data_amp_bfloat16", "fc1_weight_amp_bfloat16",
                                               "fc1_bias_amp_bfloat16"));
  // relu runs in whatever reaches it (its kernels take bfloat16): no cast around it.
  EXPECT_THAT(nodes["relu1"].second, ElementsAre("fc1"));
  EXPECT_THAT(nodes["fc2"].second, ElementsAre("relu1", "fc2_weight_amp_bfloat16",
                                               "fc2_bias_amp_bfloat16"));
  EXPECT_THAT(nodes["softmax"].second, ElementsAre("fc2_output_amp_float32", "softmax_label"));
  EXPECT_EQ(nodes["fc2_output_amp_float32"].first, "amp_cast");
  EXPECT_EQ(CountAmpCasts(amp), 6);  // data, fc1's and fc2's weights and biases, fc2's output

  std::map<std::string, DType> float32;
  for (const std::string& name : amp.ListArguments()) float32[name] = DType::kFloat32;
  ASSERT_OK_AND_ASSIGN(InferResult<DType> types, amp.InferType(float32));
  EXPECT_THAT(types.outputs, ElementsAre(DType::kFloat32));
  ASSERT_OK_AND_ASSIGN(Symbol relu, amp.GetInternals().GetOutput("relu1_output"));
  std::map<std::string, DType> relu_float32;
  for (const std::string& name : relu.ListArguments()) relu_float32[name] = DType::kFloat32;
  ASSERT_OK_AND_ASSIGN(InferResult<DType> inner, relu.InferType(relu_float32));
  EXPECT_THAT(inner.outputs, ElementsAre(DType::kBFloat16));
}

TEST(AmpPassTest, ACastIsMadeOncePerEdgeSourceAndShared) {
  Symbol data = Symbol::Variable("data"), w = Symbol::Variable("w");
  Symbol a = Op("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}}, {data, w}, "a");
  Symbol b = Op("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}}, {data, w}, "b");
  Symbol sum = Op("elemwise_add", {}, {a, b}, "sum");
  ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(sum, {.dtype = DType::kFloat16}));
  auto nodes = Nodes(amp);
  EXPECT_THAT(nodes["a"].second, ElementsAre("data_amp_float16", "w_amp_float16"));
  EXPECT_THAT(nodes["b"].second, ElementsAre("data_amp_float16", "w_amp_float16"));
  EXPECT_THAT(nodes["sum"].second, ElementsAre("a", "b"));  // both float16: no cast
  EXPECT_EQ(CountAmpCasts(amp), 2);
}

TEST(AmpPassTest, MixedInputsMeetInTheWidestTypeAndFloat32OnlyKernelsGetFloat32) {
  Symbol data = Symbol::Variable("data"), bias = Symbol::Variable("extra");
  Symbol conv = Op("Convolution", {{"num_filter", "2"}, {"kernel", "(3,3)"}}, {data}, "conv");
  Symbol plus = Op("broadcast_add", {}, {conv, bias}, "plus");
  Symbol pool = Op("Pooling", {{"kernel", "(2,2)"}, {"stride", "(2,2)"}}, {conv}, "pool");
  Symbol bn = Op("BatchNorm", {}, {conv}, "bn");
  ASSERT_OK_AND_ASSIGN(Symbol amp,
                       ConvertToMixedPrecision(Symbol::Group({plus, pool, bn}), {.dtype = DType::kBFloat16}));
  auto nodes = Nodes(amp);
  // bfloat16 + float32 adds in float32.
  EXPECT_THAT(nodes["plus"].second, ElementsAre("conv_output_amp_float32", "extra"));
  // Pooling's CPU kernels are float32 only; BatchNorm is float32 by rule. One cast serves all.
  EXPECT_THAT(nodes["pool"].second, ElementsAre("conv_output_amp_float32"));
  EXPECT_EQ(nodes["bn"].second[0], "conv_output_amp_float32");
  EXPECT_EQ(CountAmpCasts(amp), 4);  // data, weight, bias of conv; its output to float32
}

TEST(AmpPassTest, ExcludedNodesStayFloat32) {
  ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(
                                       Mlp(), {.dtype = DType::kBFloat16, .excluded_nodes = {"fc2"}}));
  auto nodes = Nodes(amp);
  EXPECT_THAT(nodes["fc2"].second, ElementsAre("relu1_output_amp_float32", "fc2_weight", "fc2_bias"));
  EXPECT_THAT(nodes["softmax"].second, ElementsAre("fc2", "softmax_label"));
}

TEST(AmpPassTest, AStaticLossScaleMultipliesTheLossGradient) {
  ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(Mlp(), {.dtype = DType::kFloat16, .loss_scale = 1024}));
  IndexedGraph graph(amp.outputs());
  const Node& loss = graph.node(graph.outputs()[0].node_id);
  EXPECT_EQ(loss.op->GetParams().at("grad_scale"), "1024");
  IndexedGraph original(Mlp().outputs());
  EXPECT_EQ(original.node(original.outputs()[0].node_id).op->GetParams().at("grad_scale"), "1");
}

TEST(AmpPassTest, BadOptionsAreRefusedByName) {
  EXPECT_THAT(ConvertToMixedPrecision(Mlp(), {.dtype = DType::kFloat32}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float32 is not a mixed-precision type")));
  EXPECT_THAT(ConvertToMixedPrecision(Mlp(), {.dtype = DType::kBFloat16, .excluded_nodes = {"fc9"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fc9")));
  EXPECT_THAT(ConvertToMixedPrecision(Mlp(), {.dtype = DType::kFloat16, .loss_scale = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("loss_scale")));
}

class AmpExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() const { return owned_->get(); }

  std::unique_ptr<Executor> Bind(const Symbol& net, const std::map<std::string, Shape>& shapes) {
    auto exec = Executor::SimpleBind(rt(), net, Context::CPU(), {.shapes = shapes});
    TESSERA_CHECK(exec.ok());
    return std::move(exec).value();
  }

  std::unique_ptr<OwnedRuntime> owned_;
};

float RoundTo(DType type, float v) {
  return type == DType::kBFloat16 ? static_cast<float>(BFloat16(v)) : static_cast<float>(Half(v));
}

// A FullyConnected converted to a low type computes what a tensor core does: operands rounded
// to the type, products summed in float32, the result rounded once.
TEST_F(AmpExecutorTest, ALowPrecisionProductMatchesTheReferenceOfItsType) {
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    Symbol fc = Op("FullyConnected", {{"num_hidden", "7"}}, {Symbol::Variable("data")}, "fc");
    ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(fc, {.dtype = type}));
    auto exec = Bind(amp, {{"data", Shape{5, 33}}});
    std::mt19937 rng(3);
    for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
    ASSERT_OK(exec->Forward(false));
    ASSERT_EQ(exec->outputs()[0].dtype(), type);
    ASSERT_OK_AND_ASSIGN(NDArray out, Cast(exec->outputs()[0], DType::kFloat32));
    const std::vector<float> x = Values(exec->arg_arrays()[0]), w = Values(exec->arg_arrays()[1]),
                             b = Values(exec->arg_arrays()[2]), y = Values(out);
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 7; ++c) {
        double acc = 0;
        for (int k = 0; k < 33; ++k) {
          acc += static_cast<double>(RoundTo(type, x[r * 33 + k])) * RoundTo(type, w[c * 33 + k]);
        }
        const float want = RoundTo(type, static_cast<float>(acc) + RoundTo(type, b[c]));
        // One rounding step of the type apart at most (the sums' order differs).
        const float ulp = std::abs(want) * (type == DType::kBFloat16 ? 0x1p-7f : 0x1p-10f) + 1e-6f;
        EXPECT_NEAR(y[r * 7 + c], want, ulp) << "row " << r << " col " << c;
      }
    }
  }
}

// Every product the pass makes 16-bit (on the CPU: staged through the float32 kernels) gives
// bit for bit the float32 operator's results on operands rounded to the type, rounded once:
// forward, and the gradients of data and weight (float32 master copies: the rounded gradient
// cast back) for a 16-bit head gradient. A bfloat16 product that runs natively (AMX,
// ops/nn/dnnl_util.h) sums in its own order: within a rounding of the type, relative to the
// largest value, instead.
TEST_F(AmpExecutorTest, StagedProductsEqualFloat32OnRoundedOperandsBitForBit) {
  struct Case {
    std::string op;
    ops::KwArgs params;
    Shape data;
  };
  const std::vector<Case> cases = {
      {"FullyConnected", {{"num_hidden", "9"}}, Shape{6, 21}},
      {"Convolution", {{"num_filter", "4"}, {"kernel", "(3,3)"}, {"pad", "(1,1)"}}, Shape{2, 3, 7, 6}},
      {"Deconvolution", {{"num_filter", "3"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}}, Shape{2, 5, 4, 4}},
  };
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(c.op, " in ", DTypeName(type)));
      Symbol net = Op(c.op, c.params, {Symbol::Variable("data")}, "op");
      ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(net, {.dtype = type}));
      auto mixed = Bind(amp, {{"data", c.data}}), plain = Bind(net, {{"data", c.data}});
      std::mt19937 rng(17);
      for (size_t i = 0; i < plain->arg_arrays().size(); ++i) {
        std::vector<float> v = RandomValues(plain->arg_arrays()[i].Size(), &rng);
        NDArray m = mixed->arg_arrays()[i], p = plain->arg_arrays()[i];
        ASSERT_OK(m.SyncCopyFromCPU(v.data(), v.size()));
        for (float& x : v) x = RoundTo(type, x);  // the reference sees the rounded operands
        ASSERT_OK(p.SyncCopyFromCPU(v.data(), v.size()));
      }
      ASSERT_OK(mixed->Forward(true));
      ASSERT_OK(plain->Forward(true));
      const Shape out_shape = plain->outputs()[0].shape();
      std::vector<float> head = RandomValues(out_shape.Size(), &rng);
      for (float& x : head) x = RoundTo(type, x);
      ASSERT_OK_AND_ASSIGN(NDArray head_f32, FromVector<float>(rt(), out_shape, head));
      ASSERT_OK_AND_ASSIGN(NDArray head_low, Cast(head_f32, type));
      ASSERT_OK(mixed->Backward({head_low}));
      ASSERT_OK(plain->Backward({head_f32}));
      const bool native = type == DType::kBFloat16 && c.op != "Deconvolution" && ops::nn::NativeBFloat16Products();
      auto expect = [&](const std::vector<float>& got, std::vector<float> want, const std::string& what) {
        for (float& x : want) x = RoundTo(type, x);
        if (!native) {
          EXPECT_EQ(got, want) << what;
          return;
        }
        ASSERT_EQ(got.size(), want.size());
        float largest = 0;
        for (float x : want) largest = std::max(largest, std::abs(x));
        for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], largest * 0x1p-7f) << what << " " << k;
      };
      ASSERT_OK_AND_ASSIGN(NDArray out, Cast(mixed->outputs()[0], DType::kFloat32));
      expect(Values(out), Values(plain->outputs()[0]), "forward");
      for (size_t i = 0; i < plain->grad_arrays().size(); ++i) {
        expect(Values(mixed->grad_arrays()[i]), Values(plain->grad_arrays()[i]), absl::StrCat("gradient ", i));
      }
    }
  }
}

// A converted network trains as the float32 one does, within the low type's precision: the
// same loss gradient direction, float32 gradients for the float32 weights.
TEST_F(AmpExecutorTest, AConvertedNetworksGradientsAreFloat32AndCloseToFloat32Training) {
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    ASSERT_OK_AND_ASSIGN(Symbol amp, ConvertToMixedPrecision(Mlp(), {.dtype = type}));
    const std::map<std::string, Shape> shapes = {{"data", Shape{8, 20}}, {"softmax_label", Shape{8}}};
    auto full = Bind(Mlp(), shapes), mixed = Bind(amp, shapes);
    const std::vector<std::string> names = Mlp().ListArguments();
    std::mt19937 rng(11);
    for (size_t i = 0; i < full->arg_arrays().size(); ++i) {
      std::vector<float> v = RandomValues(full->arg_arrays()[i].Size(), &rng);
      if (names[i] == "softmax_label") {
        for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k % 5);
      }
      for (Executor* e : {full.get(), mixed.get()}) {
        NDArray target = e->arg_arrays()[i];
        ASSERT_OK(target.SyncCopyFromCPU(v.data(), v.size()));
      }
    }
    for (Executor* e : {full.get(), mixed.get()}) {
      ASSERT_OK(e->Forward(true));
      ASSERT_OK(e->Backward());
    }
    const std::vector<float> p_full = Values(full->outputs()[0]), p_mixed = Values(mixed->outputs()[0]);
    for (size_t k = 0; k < p_full.size(); ++k) EXPECT_NEAR(p_mixed[k], p_full[k], 0.03) << k;
    for (size_t i = 0; i < full->grad_arrays().size(); ++i) {
      if (full->grad_arrays()[i].is_none() || names[i] == "data" ||
          names[i] == "softmax_label") {
        continue;
      }
      SCOPED_TRACE(names[i]);
      ASSERT_EQ(mixed->grad_arrays()[i].dtype(), DType::kFloat32);
      const std::vector<float> g = Values(full->grad_arrays()[i]), h = Values(mixed->grad_arrays()[i]);
      double dot = 0, gg = 0, hh = 0;
      for (size_t k = 0; k < g.size(); ++k) {
        dot += static_cast<double>(g[k]) * h[k];
        gg += static_cast<double>(g[k]) * g[k];
        hh += static_cast<double>(h[k]) * h[k];
      }
      EXPECT_GT(dot / std::sqrt(gg * hh), 0.99);  // the same direction
      EXPECT_NEAR(std::sqrt(hh / gg), 1.0, 0.05);  // and length
    }
  }
}

TEST_F(AmpExecutorTest, CastConvertsBothWaysAndAddsIntoGradients) {
  Symbol x = Symbol::Variable("x");
  Symbol cast = Op("Cast", {{"dtype", "bfloat16"}}, {x}, "cast");
  auto exec = Executor::SimpleBind(rt(), cast, Context::CPU(),
                                   {.shapes = {{"x", Shape{3}}}, .grad_req = OpReqType::kAddTo});
  ASSERT_OK(exec);
  const std::vector<float> zeros(3, 0.0f);
  ASSERT_OK(NDArray((*exec)->grad_arrays()[0]).SyncCopyFromCPU(zeros.data(), 3));
  NDArray arg = (*exec)->arg_arrays()[0];
  const std::vector<float> v = {1.0f, 1.00390625f, -3.0e38f};  // the 2nd is halfway: to even
  ASSERT_OK(arg.SyncCopyFromCPU(v.data(), v.size()));
  ASSERT_OK((*exec)->Forward(true));
  ASSERT_OK_AND_ASSIGN(std::vector<BFloat16> y, (*exec)->outputs()[0].AsVector<BFloat16>());
  EXPECT_EQ(static_cast<float>(y[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(y[1]), 1.0f);
  EXPECT_EQ(static_cast<float>(y[2]), static_cast<float>(BFloat16(-3.0e38f)));
  ASSERT_OK_AND_ASSIGN(NDArray head, FromVector<BFloat16>(rt(), Shape{3}, {BFloat16(0.5f), BFloat16(2.0f), BFloat16(-1.0f)}));
  ASSERT_OK((*exec)->Backward({head}));
  ASSERT_OK((*exec)->Backward({head}));
  EXPECT_THAT(Values((*exec)->grad_arrays()[0]), ElementsAre(1.0f, 4.0f, -2.0f));
}

}  // namespace
}  // namespace tessera::graph
