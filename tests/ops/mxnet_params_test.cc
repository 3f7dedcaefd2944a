// MXNet compatibility of the operator parameters: for every operator Tessera registers,
// MXNet 1.9's full declared parameter list (read from its DMLC_DECLARE_PARAMETER blocks; the
// operator's schema comment names the source file) given at once, each as MXNet's symbol
// JSON spells a value of it (strings, "True"/"False", "(0, 0)", "()", "None"), creates the
// operator. The values MXNet takes that would change the result and that Tessera does not
// implement are refused by name. A new operator without its row here fails the test.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::IsOkAndHolds;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// MXNet 1.9's parameters of each operator, every one, with a value MXNet writes: its
// default where it has one (as str() of the Python value, which is how the symbol writer
// spells it), else a typical value. Aliases of one MXNet operator (add_n/ElementWiseSum)
// and operators sharing a parameter struct get the same list.
const std::map<std::string, KwArgs>& Mxnet19Params() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, KwArgs>;
    const KwArgs none;
    const KwArgs scalar = {{"scalar", "1"}, {"is_int", "True"}};
    const KwArgs reduce = {{"axis", "None"}, {"keepdims", "False"}, {"exclude", "False"}};
    const KwArgs dot = {
        {"transpose_a", "False"}, {"transpose_b", "False"}, {"forward_stype", "None"}};
    const KwArgs softmax = {
        {"axis", "-1"}, {"temperature", "None"}, {"dtype", "None"}, {"use_length", "False"}};
    const KwArgs regression = {{"grad_scale", "1.0"}};
    const KwArgs sum = {{"num_args", "2"}};

    // src/operator/nn/activation-inl.h
    (*t)["Activation"] = {{"act_type", "relu"}};
    // src/operator/nn/batch_norm-inl.h
    (*t)["BatchNorm"] = {{"eps", "0.001"},
                         {"momentum", "0.9"},
                         {"fix_gamma", "True"},
                         {"use_global_stats", "False"},
                         {"output_mean_var", "False"},
                         {"axis", "1"},
                         {"cudnn_off", "False"},
                         {"min_calib_range", "None"},
                         {"max_calib_range", "None"}};
    // src/operator/tensor/elemwise_unary_op_basic.cc
    (*t)["BlockGrad"] = none;
    // src/operator/tensor/elemwise_unary_op_basic.cc (CastParam), src/operator/tensor/amp_cast.h
    (*t)["Cast"] = {{"dtype", "float16"}};
    (*t)["amp_cast"] = {{"dtype", "bfloat16"}};
    // Not MXNet's: Tessera's dynamic loss scaling hook (graph/amp.h), without parameters.
    (*t)["_amp_loss_scale"] = none;
    // src/operator/nn/concat-inl.h
    (*t)["Concat"] = {{"num_args", "2"}, {"dim", "1"}};
    // src/operator/nn/convolution-inl.h
    (*t)["Convolution"] = {{"kernel", "(3, 3)"},   {"stride", "(1, 1)"}, {"dilate", "(1, 1)"},
                           {"pad", "(0, 0)"},      {"num_filter", "8"},  {"num_group", "1"},
                           {"workspace", "1024"},  {"no_bias", "False"}, {"cudnn_tune", "None"},
                           {"cudnn_off", "False"}, {"layout", "None"}};
    // src/operator/nn/deconvolution-inl.h
    (*t)["Deconvolution"] = {{"kernel", "(3, 3)"}, {"stride", "(1, 1)"},   {"dilate", "(1, 1)"},
                             {"pad", "(0, 0)"},    {"adj", "(0, 0)"},      {"target_shape", "()"},
                             {"num_filter", "8"},  {"num_group", "1"},     {"workspace", "512"},
                             {"no_bias", "True"},  {"cudnn_tune", "None"}, {"cudnn_off", "False"},
                             {"layout", "None"}};
    // src/operator/nn/dropout-inl.h
    (*t)["Dropout"] = {{"p", "0.5"}, {"mode", "training"}, {"axes", "()"}, {"cudnn_off", "False"}};
    // src/operator/tensor/elemwise_sum.cc (add_n, alias ElementWiseSum)
    (*t)["ElementWiseSum"] = sum;
    (*t)["add_n"] = sum;
    // src/operator/tensor/indexing_op.h
    (*t)["Embedding"] = {
        {"input_dim", "10"}, {"output_dim", "4"}, {"dtype", "float32"}, {"sparse_grad", "False"}};
    // src/operator/tensor/matrix_op.cc
    (*t)["Flatten"] = none;
    // src/operator/nn/fully_connected-inl.h
    (*t)["FullyConnected"] = {{"num_hidden", "10"}, {"no_bias", "False"}, {"flatten", "True"}};
    // src/operator/leaky_relu-inl.h
    (*t)["LeakyReLU"] = {{"act_type", "leaky"},
                         {"slope", "0.25"},
                         {"lower_bound", "0.125"},
                         {"upper_bound", "0.334"}};
    // src/operator/regression_output-inl.h
    (*t)["LinearRegressionOutput"] = regression;
    (*t)["LogisticRegressionOutput"] = regression;
    (*t)["MAERegressionOutput"] = regression;
    // src/operator/make_loss-inl.h
    (*t)["MakeLoss"] = {{"grad_scale", "1.0"}, {"valid_thresh", "0.0"}, {"normalization", "null"}};
    // src/operator/nn/pooling-inl.h (kernel has no usable default without global_pool)
    (*t)["Pooling"] = {{"kernel", "(2, 2)"},
                       {"pool_type", "max"},
                       {"global_pool", "False"},
                       {"cudnn_off", "False"},
                       {"pooling_convention", "valid"},
                       {"stride", "()"},
                       {"pad", "()"},
                       {"p_value", "None"},
                       {"count_include_pad", "None"},
                       {"layout", "None"}};
    // src/operator/tensor/matrix_op-inl.h
    (*t)["Reshape"] = {{"shape", "(0, -1)"},
                       {"reverse", "False"},
                       {"target_shape", "()"},
                       {"keep_highest", "False"}};
    // src/operator/slice_channel-inl.h
    (*t)["SliceChannel"] = {{"num_outputs", "2"}, {"axis", "1"}, {"squeeze_axis", "False"}};
    // src/operator/softmax_output-inl.h
    (*t)["SoftmaxOutput"] = {{"grad_scale", "1.0"},       {"ignore_label", "-1.0"},
                             {"multi_output", "False"},   {"use_ignore", "False"},
                             {"preserve_shape", "False"}, {"normalization", "null"},
                             {"out_grad", "False"},       {"smooth_alpha", "0.0"}};
    // src/operator/tensor/elemwise_binary_scalar_op.h (NumpyBinaryScalarParam)
    for (const char* op :
         {"_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar",
          "_rdiv_scalar", "_power_scalar", "_rpower_scalar", "smooth_l1"}) {
      (*t)[op] = scalar;
    }
    // src/operator/tensor/elemwise_unary_op_*.cc
    for (const char* op :
         {"abs", "cos", "exp", "log", "negative", "reciprocal", "rsqrt", "sin", "sqrt", "square"}) {
      (*t)[op] = none;
    }
    // src/operator/tensor/elemwise_binary_op_basic.cc, elemwise_binary_broadcast_op_*.cc
    for (const char* op : {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div",
                           "broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                           "broadcast_power", "broadcast_maximum", "broadcast_minimum"}) {
      (*t)[op] = none;
    }
    // src/operator/tensor/dot-inl.h
    (*t)["dot"] = dot;
    (*t)["batch_dot"] = dot;
    // src/operator/nn/softmax-inl.h
    (*t)["softmax"] = softmax;
    (*t)["log_softmax"] = softmax;
    // src/operator/tensor/broadcast_reduce_op.h
    for (const char* op : {"sum", "mean", "prod", "max", "min"}) (*t)[op] = reduce;
    // src/operator/tensor/matrix_op-inl.h
    (*t)["transpose"] = {{"axes", "()"}};
    return t;
  }();
  return *table;
}

TEST(MxnetParamsTest, TheTableCoversEveryRegisteredOperator) {
  std::vector<std::string> registered;
  for (const OpInfo* info : OpRegistry::Global().List()) {
    registered.push_back(info->name);
    EXPECT_TRUE(Mxnet19Params().contains(info->name))
        << info->name << " has no row of MXNet 1.9 parameters in this test";
  }
  for (const auto& [name, params] : Mxnet19Params()) {
    EXPECT_NE(OpRegistry::Global().Find(name), nullptr) << name << " is not registered";
  }
  EXPECT_EQ(registered.size(), Mxnet19Params().size());
}

TEST(MxnetParamsTest, EveryOperatorTakesAllOfMxnetsParametersAtOnce) {
  for (const auto& [name, params] : Mxnet19Params()) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<OperatorProperty>> prop =
        OpRegistry::Global().Create(name, params);
    ASSERT_THAT(prop, IsOk());
    // Every parameter is one of the operator's own (none dropped on the way), and what it
    // reports reads back to the same parameters.
    const std::map<std::string, std::string> got = (*prop)->GetParams();
    for (const auto& [key, value] : params) EXPECT_TRUE(got.contains(key)) << key;
    EXPECT_EQ(got.size(), params.size());
    absl::StatusOr<std::unique_ptr<OperatorProperty>> again =
        OpRegistry::Global().Create(name, KwArgs(got.begin(), got.end()));
    ASSERT_THAT(again, IsOk());
    EXPECT_EQ((*again)->GetParams(), got);
  }
}

// The parameters read as what MXNet means by them.
TEST(MxnetParamsTest, MxnetSpellingsParseToTheirValues) {
  auto params = [](const std::string& op, const KwArgs& kwargs) {
    absl::StatusOr<std::unique_ptr<OperatorProperty>> prop =
        OpRegistry::Global().Create(op, kwargs);
    EXPECT_THAT(prop, IsOk());
    return prop.ok() ? (*prop)->GetParams() : std::map<std::string, std::string>{};
  };
  const auto bn = params("BatchNorm", {{"min_calib_range", "-1.5"}, {"fix_gamma", "False"}});
  EXPECT_EQ(bn.at("min_calib_range"), "-1.5");
  EXPECT_EQ(bn.at("max_calib_range"), "None");
  EXPECT_EQ(bn.at("fix_gamma"), "false");
  const auto conv =
      params("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"layout", "NCHW"}});
  EXPECT_EQ(conv.at("kernel"), "(3,3)");
  EXPECT_EQ(conv.at("stride"), "()");
  EXPECT_EQ(params("Pooling", {{"kernel", "(2, 2)"}, {"count_include_pad", "None"}})
                .at("count_include_pad"),
            "true");
  EXPECT_EQ(params("sum", {{"axis", "1"}, {"keepdims", "1"}}).at("axis"), "(1,)");
  EXPECT_EQ(params("sum", {{"axis", "(0, 2)"}}).at("axis"), "(0,2)");
  EXPECT_EQ(params("softmax", {{"temperature", "None"}, {"dtype", "float32"}}).at("temperature"),
            "1");
  EXPECT_EQ(params("_mul_scalar", {{"scalar", "0.5"}, {"is_int", "0"}}).at("scalar"), "0.5");
  EXPECT_EQ(params("dot", {{"forward_stype", "csr"}}).at("forward_stype"), "csr");
}

struct Refusal {
  std::string op;
  KwArgs params;
  std::string name;   // the parameter
  std::string value;  // as given
};

// Values MXNet takes that change the result and that Tessera does not implement: refused by
// name, with the operator, the parameter and the value in the message.
TEST(MxnetParamsTest, UnimplementedValuesAreRefusedByName) {
  const KwArgs conv = {{"kernel", "(3, 3)"}, {"num_filter", "4"}};
  const KwArgs pool = {{"kernel", "(2, 2)"}};
  auto with = [](KwArgs base, const std::string& key, const std::string& value) {
    base.emplace_back(key, value);
    return base;
  };
  const std::vector<Refusal> refusals = {
      {"Convolution", with(conv, "layout", "NHWC"), "layout", "NHWC"},
      {"Convolution", with(conv, "layout", "NCDHW"), "layout", "NCDHW"},
      {"Deconvolution", with(conv, "layout", "NDHWC"), "layout", "NDHWC"},
      {"Pooling", with(pool, "layout", "NWC"), "layout", "NWC"},
      {"Pooling", with(pool, "pooling_convention", "same"), "pooling_convention", "same"},
      {"SoftmaxOutput", {{"out_grad", "True"}}, "out_grad", "True"},
      {"softmax", {{"use_length", "True"}}, "use_length", "True"},
      {"log_softmax", {{"dtype", "float64"}}, "dtype", "float64"},
      {"Embedding",
       {{"input_dim", "5"}, {"output_dim", "2"}, {"dtype", "int32"}},
       "dtype",
       "int32"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(absl::StrCat(r.op, " ", r.name, "=", r.value));
    EXPECT_THAT(
        OpRegistry::Global().Create(r.op, r.params).status(),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr(absl::StrCat(r.op, ": ")),
                       HasSubstr(absl::StrCat(r.name, " '", r.value, "' is not supported")))));
  }
  // The supported values of the same parameters are taken.
  EXPECT_THAT(OpRegistry::Global().Create("Convolution", with(conv, "layout", "NCHW")), IsOk());
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", with(pool, "pooling_convention", "full")),
              IsOk());
  EXPECT_THAT(OpRegistry::Global().Create("softmax", {{"dtype", "float32"}}), IsOk());
}

// Reshape's deprecated target_shape / keep_highest (MXNet 0.8 files) give MXNet's shapes.
TEST(MxnetParamsTest, ReshapeTargetShapeAsMxnet) {
  auto reshape = [](const KwArgs& kwargs, const Shape& in) -> absl::StatusOr<Shape> {
    absl::StatusOr<std::unique_ptr<OperatorProperty>> prop =
        OpRegistry::Global().Create("Reshape", kwargs);
    if (!prop.ok()) return prop.status();
    std::vector<Shape> in_shapes{in}, out(1), aux;
    absl::StatusOr<bool> done = (*prop)->InferShape(&in_shapes, &out, &aux);
    if (!done.ok()) return done.status();
    return out[0];
  };
  EXPECT_THAT(reshape({{"target_shape", "(0, 12)"}}, Shape{2, 3, 4}), IsOkAndHolds(Shape{2, 12}));
  EXPECT_THAT(reshape({{"target_shape", "(8, 3)"}}, Shape{2, 3, 4}), IsOkAndHolds(Shape{8, 3}));
  // keep_highest: the first dimension is the input's, whatever target_shape says.
  EXPECT_THAT(reshape({{"target_shape", "(5, 0, 2)"}, {"keep_highest", "True"}}, Shape{2, 3, 4}),
              IsOkAndHolds(Shape{2, 6, 2}));
  // `shape` wins over target_shape when both are given, as in MXNet.
  EXPECT_THAT(reshape({{"shape", "(-1,)"}, {"target_shape", "(4, 6)"}}, Shape{2, 3, 4}),
              IsOkAndHolds(Shape{24}));
  EXPECT_THAT(reshape({{"target_shape", "(5, 0)"}}, Shape{2, 3, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_shape (5,0)")));
  EXPECT_THAT(reshape({{"target_shape", "(0, 0)"}}, Shape{2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_shape")));
  EXPECT_THAT(reshape({{"reverse", "True"}}, Shape{2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'shape' is missing")));
}

// MXNet's other names of the operators (what older symbol files say) find the operator.
TEST(MxnetParamsTest, MxnetAliasesNameTheOperators) {
  const std::map<std::string, std::string> aliases = {{"_Plus", "elemwise_add"},
                                                      {"_plus", "elemwise_add"},
                                                      {"_add", "elemwise_add"},
                                                      {"_Minus", "elemwise_sub"},
                                                      {"_Mul", "elemwise_mul"},
                                                      {"_Div", "elemwise_div"},
                                                      {"_PlusScalar", "_plus_scalar"},
                                                      {"_RDivScalar", "_rdiv_scalar"},
                                                      {"_PowerScalar", "_power_scalar"},
                                                      {"Softmax", "SoftmaxOutput"},
                                                      {"flatten", "Flatten"},
                                                      {"reshape", "Reshape"},
                                                      {"concat", "Concat"},
                                                      {"split", "SliceChannel"},
                                                      {"stop_gradient", "BlockGrad"},
                                                      {"broadcast_plus", "broadcast_add"},
                                                      {"broadcast_minus", "broadcast_sub"},
                                                      {"sum_axis", "sum"},
                                                      {"max_axis", "max"},
                                                      {"min_axis", "min"}};
  for (const auto& [alias, name] : aliases) {
    SCOPED_TRACE(alias);
    const OpInfo* info = OpRegistry::Global().Find(alias);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->name, name);
  }
  absl::StatusOr<std::unique_ptr<OperatorProperty>> softmax =
      OpRegistry::Global().Create("Softmax", {{"grad_scale", "2"}});
  ASSERT_THAT(softmax, IsOk());
  EXPECT_EQ((*softmax)->TypeString(), "SoftmaxOutput");  // written back under its own name
  // Aliases are not operators of their own.
  for (const OpInfo* info : OpRegistry::Global().List()) {
    EXPECT_FALSE(aliases.contains(info->name)) << info->name;
  }
}

}  // namespace
}  // namespace tessera::ops
