// ParamSchema: defaults, parsing of every field type (MXNet's optional ones too), readable
// errors, values refused by SupportedOnly, round trips; and the operator registry's lookups.
#include "ops/param.h"

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

enum class Mode { kFast, kSlow };

struct TestParam {
  int num_filter = 0;
  int64_t workspace = 512;
  float slope = 0.25f;
  double eps = 1e-3;
  bool no_bias = false;
  std::string name = "x";
  Shape kernel;
  std::vector<int> axes;
  DType dtype = DType::kFloat32;
  Mode mode = Mode::kFast;

  static const ParamSchema<TestParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<TestParam>("TestOp");
      s->Field("num_filter", &TestParam::num_filter).Required().Range(1, 100).Describe("filters");
      s->Field("workspace", &TestParam::workspace).Lower(0);
      s->Field("slope", &TestParam::slope);
      s->Field("eps", &TestParam::eps);
      s->Field("no_bias", &TestParam::no_bias);
      s->Field("name", &TestParam::name);
      s->Field("kernel", &TestParam::kernel).Range(1, 64);
      s->Field("axes", &TestParam::axes);
      s->Field("dtype", &TestParam::dtype);
      s->Field("mode", &TestParam::mode).Enum({{"fast", Mode::kFast}, {"slow", Mode::kSlow}});
      return s;
    }();
    return *schema;
  }
};

TEST(ParamSchemaTest, DefaultsAndParsing) {
  TestParam p;
  ASSERT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "8"}}), IsOk());
  EXPECT_EQ(p.num_filter, 8);
  EXPECT_EQ(p.workspace, 512);
  EXPECT_EQ(p.mode, Mode::kFast);

  ASSERT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "3"},
                                            {"workspace", "1024"},
                                            {"slope", "0.5"},
                                            {"eps", "1e-5"},
                                            {"no_bias", "True"},
                                            {"name", "conv1"},
                                            {"kernel", "(3, 5)"},
                                            {"axes", "(0,-1)"},
                                            {"dtype", "float16"},
                                            {"mode", "slow"}}),
              IsOk());
  EXPECT_EQ(p.num_filter, 3);
  EXPECT_EQ(p.workspace, 1024);
  EXPECT_FLOAT_EQ(p.slope, 0.5f);
  EXPECT_DOUBLE_EQ(p.eps, 1e-5);
  EXPECT_TRUE(p.no_bias);
  EXPECT_EQ(p.name, "conv1");
  EXPECT_EQ(p.kernel, (Shape{3, 5}));
  EXPECT_EQ(p.axes, (std::vector<int>{0, -1}));
  EXPECT_EQ(p.dtype, DType::kFloat16);
  EXPECT_EQ(p.mode, Mode::kSlow);

  // Init resets to defaults first: nothing leaks from the previous call.
  ASSERT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}}), IsOk());
  EXPECT_EQ(p.kernel, Shape{});
  EXPECT_EQ(p.mode, Mode::kFast);
}

TEST(ParamSchemaTest, NoneMeansUnsetAsMXNetWritesIt) {
  TestParam p;
  ASSERT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "2"},
                                            {"axes", "None"},
                                            {"kernel", "None"},
                                            {"eps", "None"},
                                            {"no_bias", "None"},
                                            {"name", "None"}}),
              IsOk());
  EXPECT_TRUE(p.axes.empty());
  EXPECT_EQ(p.kernel, Shape{});
  EXPECT_DOUBLE_EQ(p.eps, 1e-3);
  EXPECT_FALSE(p.no_bias);
  EXPECT_EQ(p.name, "None");  // a string takes "None" literally
  // A required field given as None is missing.
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "None"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("num_filter"), HasSubstr("missing"))));
  // An enum without a "None" value still keeps its default; one with it takes the value.
  ASSERT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"mode", "None"}}), IsOk());
  EXPECT_EQ(p.mode, Mode::kFast);
}

TEST(ParamSchemaTest, GetRoundTrips) {
  TestParam p;
  ASSERT_THAT(TestParam::Schema().Init(
                  &p, {{"num_filter", "7"}, {"kernel", "(2,2)"}, {"mode", "slow"}, {"axes", "(1,)"}}),
              IsOk());
  const auto params = TestParam::Schema().Get(p);
  EXPECT_EQ(params.at("kernel"), "(2,2)");
  EXPECT_EQ(params.at("mode"), "slow");
  EXPECT_EQ(params.at("no_bias"), "false");
  TestParam q;
  ASSERT_THAT(TestParam::Schema().Init(&q, KwArgs(params.begin(), params.end())), IsOk());
  EXPECT_EQ(TestParam::Schema().Get(q), params);
}

TEST(ParamSchemaTest, FloatsFormatToTheSameValue) {
  // Six digits where they suffice (what symbol files hold), more where they do not: a GPU
  // operator built from GetParams() must compute with the CPU operator's number.
  EXPECT_EQ(param_internal::Format(0.5), "0.5");
  EXPECT_EQ(param_internal::Format(0.0001), "0.0001");
  for (double v : {0.1234567, 1.0 / 3.0, 2.718281828459045, 1e-7 / 3}) {
    double back = 0;
    ASSERT_EQ(param_internal::Parse(param_internal::Format(v), &back), "");
    EXPECT_EQ(back, v) << param_internal::Format(v);
  }
  float f = 0;
  ASSERT_EQ(param_internal::Parse(param_internal::Format(0.1234567f), &f), "");
  EXPECT_EQ(f, 0.1234567f);
}

TEST(ParamSchemaTest, ReadableErrors) {
  TestParam p;
  EXPECT_THAT(TestParam::Schema().Init(&p, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("TestOp"), HasSubstr("'num_filter' is missing"))));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "2"}, {"kernal", "(3,3)"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("unknown parameter 'kernal'"), HasSubstr("kernel"))));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "abc"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'abc'"), HasSubstr("num_filter"), HasSubstr("integer"))));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "101"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[1, 100]")));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"kernel", "(3,0)"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel")));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"mode", "medium"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'medium'"), HasSubstr("'fast', 'slow'"))));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"no_bias", "maybe"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no_bias")));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"eps", "nan"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  EXPECT_THAT(TestParam::Schema().Init(&p, {{"num_filter", "1"}, {"dtype", "float8"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float8")));
}

TEST(ParamSchemaTest, InfoDescribesFields) {
  const auto info = TestParam::Schema().Info();
  ASSERT_EQ(info.size(), 10u);
  EXPECT_EQ(info[0].name, "num_filter");
  EXPECT_TRUE(info[0].required);
  EXPECT_EQ(info[0].description, "filters");
  EXPECT_THAT(info[0].type, HasSubstr("[1, 100]"));
  EXPECT_EQ(info[1].default_value, "512");
  EXPECT_EQ(info[9].type, "{'fast', 'slow'}");
  EXPECT_EQ(info[9].default_value, "fast");
}

// MXNet's dmlc::optional fields and the values Tessera implements of a wider MXNet range.
struct MxnetStyleParam {
  std::optional<float> calib;
  std::string layout = "None";
  bool extra = false;

  static const ParamSchema<MxnetStyleParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<MxnetStyleParam>("StyleOp");
      s->Field("calib", &MxnetStyleParam::calib).Range(-10, 10).Describe("a range");
      s->Field("layout", &MxnetStyleParam::layout)
          .Enum({{"None", "None"}, {"NCHW", "NCHW"}, {"NHWC", "NHWC"}})
          .SupportedOnly({"None", "NCHW"})
          .Describe("data layout");
      s->Field("extra", &MxnetStyleParam::extra).SupportedOnly({false});
      return s;
    }();
    return *schema;
  }
};

TEST(ParamSchemaTest, OptionalFieldsTakeNoneAsEmpty) {
  MxnetStyleParam p;
  ASSERT_THAT(MxnetStyleParam::Schema().Init(&p, {{"calib", "-2.5"}}), IsOk());
  EXPECT_EQ(p.calib, -2.5f);
  EXPECT_EQ(MxnetStyleParam::Schema().Get(p).at("calib"), "-2.5");
  ASSERT_THAT(MxnetStyleParam::Schema().Init(&p, {{"calib", "None"}}), IsOk());
  EXPECT_FALSE(p.calib.has_value());
  EXPECT_EQ(MxnetStyleParam::Schema().Get(p).at("calib"), "None");
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"calib", "11"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[-10, 10]")));
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"calib", "low"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'low'")));
  const ParamFieldInfo info = MxnetStyleParam::Schema().Info()[0];
  EXPECT_THAT(info.type, HasSubstr("float or None"));
  EXPECT_EQ(info.default_value, "None");
}

TEST(ParamSchemaTest, SupportedOnlyRefusesOtherValuesByName) {
  MxnetStyleParam p;
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"layout", "NCHW"}, {"extra", "False"}}), IsOk());
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"layout", "NHWC"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("StyleOp: layout 'NHWC' is not supported (only 'None', 'NCHW')")));
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"extra", "True"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("StyleOp: extra 'True' is not supported (only 'false')")));
  // A value that does not parse at all is still an invalid value, not an unsupported one.
  EXPECT_THAT(MxnetStyleParam::Schema().Init(&p, {{"layout", "CHWN"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid value 'CHWN'")));
  const std::vector<ParamFieldInfo> info = MxnetStyleParam::Schema().Info();
  EXPECT_EQ(info[1].description, "data layout; Tessera supports only 'None', 'NCHW'");
  EXPECT_EQ(info[2].description, "Tessera supports only 'false'");
}

TEST(OpRegistryTest, UnknownOperatorIsNotFound) {
  EXPECT_THAT(OpRegistry::Global().Create("Convolutoin", {}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'Convolutoin'")));
  EXPECT_EQ(OpRegistry::Global().Find("no such op"), nullptr);
}

}  // namespace
}  // namespace tessera::ops
