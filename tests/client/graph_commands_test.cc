// `tessera graph inspect|run` as library calls: shapes and parameter counts, and the
// forward pass from .npy inputs and a params file (Tessera's or MXNet's) against the executor
// itself.
#include "client/graph_commands.h"

#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/status_matchers.h"
#include "examples/models.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"
#include "ndarray/params_file.h"
#include "ndarray/serialization.h"
#include "tests/gpu_test_util.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

TEST(GraphCommandsTest, ParsesFlags) {
  auto shape = ParseShapeFlag("data=64,1,28,28");
  ASSERT_THAT(shape.status(), IsOk());
  EXPECT_EQ(shape->first, "data");
  EXPECT_EQ(shape->second, (Shape{64, 1, 28, 28}));
  for (const char* bad : {"data", "data=", "=1,2", "data=1,x", "data=1,0"}) {
    EXPECT_THAT(ParseShapeFlag(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad)));
  }
  EXPECT_THAT(ParseNamedPathFlag("data").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GraphCommandsTest, InspectPrintsShapesAndParameterCount) {
  auto lenet = examples::LeNet();
  ASSERT_THAT(lenet.status(), IsOk());
  auto text = InspectGraph(*lenet, {{"data", Shape{64, 1, 28, 28}}});
  ASSERT_THAT(text.status(), IsOk());
  EXPECT_THAT(*text, HasSubstr("conv2_weight    (50,20,5,5)        25000"));
  EXPECT_THAT(*text, HasSubstr("softmax_output  (64,10)"));
  EXPECT_THAT(*text, HasSubstr("parameters: 431080\n"));
  auto unknown = InspectGraph(*lenet, {});
  ASSERT_THAT(unknown.status(), IsOk());
  EXPECT_THAT(*unknown, HasSubstr("some shapes unknown"));
  EXPECT_THAT(InspectGraph(*lenet, {{"data", Shape{64, 3, 28, 28}}, {"conv1_weight", Shape{20, 1, 5, 5}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'conv1'")));
}

class RunGraphTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() const { return owned_->get(); }
  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(RunGraphTest, OutputsEqualTheExecutorsWithTheSameParameters) {
  auto mlp = examples::Mlp(2, 16, 4);
  ASSERT_THAT(mlp.status(), IsOk());
  graph::SimpleBindOptions bind{.shapes = {{"data", Shape{3, 8}}}, .grad_req = OpReqType::kNullOp};
  auto exec = graph::Executor::SimpleBind(rt(), *mlp, Context::CPU(), bind);
  ASSERT_THAT(exec.status(), IsOk());
  std::mt19937 rng(21);
  std::map<std::string, NDArray> params;
  for (const auto& [name, array] : (*exec)->arg_dict()) {
    graph::testing::SetRandom(array, &rng);
    if (name != "data" && name != "softmax_label") params["arg:" + name] = array;
  }
  ASSERT_THAT((*exec)->Forward(false), IsOk());
  const std::string dir = TempDir() + "/run_params";
  std::filesystem::create_directories(dir);
  ASSERT_THAT(SaveArrays(dir + "/net.params", params), IsOk());
  ASSERT_THAT(SaveNpy(dir + "/x.npy", (*exec)->arg_dict()["data"]), IsOk());

  RunGraphOptions options{.inputs = {{"data", dir + "/x.npy"}}, .params_path = dir + "/net.params",
                          .output_dir = dir + "/out"};
  auto written = RunGraph(rt(), *mlp, options);
  ASSERT_THAT(written.status(), IsOk());
  ASSERT_EQ(written->size(), 1u);
  EXPECT_EQ((*written)[0], dir + "/out/softmax_output.npy");
  auto out = LoadNpy(rt(), (*written)[0]);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_EQ(graph::testing::Values(*out), graph::testing::Values((*exec)->outputs()[0]));

  // The same parameters as an MXNet .params file give the same outputs.
  ASSERT_THAT(SaveParamsFile(dir + "/net-0000.params", params, ParamsFormat::kMxnet), IsOk());
  options.params_path = dir + "/net-0000.params";
  options.output_dir = dir + "/out_mxnet";
  written = RunGraph(rt(), *mlp, options);
  ASSERT_THAT(written.status(), IsOk());
  auto out_mxnet = LoadNpy(rt(), (*written)[0]);
  ASSERT_THAT(out_mxnet.status(), IsOk());
  EXPECT_EQ(graph::testing::Values(*out_mxnet), graph::testing::Values((*exec)->outputs()[0]));

  // In mixed precision: float32 outputs, the float32 ones within bfloat16's precision.
  options.params_path = dir + "/net.params";
  options.output_dir = dir + "/out_amp";
  options.amp = DType::kBFloat16;
  written = RunGraph(rt(), *mlp, options);
  ASSERT_THAT(written.status(), IsOk());
  auto out_amp = LoadNpy(rt(), (*written)[0]);
  ASSERT_THAT(out_amp.status(), IsOk());
  ASSERT_EQ(out_amp->dtype(), DType::kFloat32);
  const std::vector<float> want = graph::testing::Values((*exec)->outputs()[0]),
                           got = graph::testing::Values(*out_amp);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.02) << i;
  EXPECT_NE(got, want);  // it did run in bfloat16
  options.amp = DType::kFloat32;
  EXPECT_THAT(RunGraph(rt(), *mlp, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--amp")));
  options.amp = DType::kUnknown;

  // A parameter missing from the file is named; so is an input the graph lacks.
  params.erase("arg:fc2_bias");
  ASSERT_THAT(SaveArrays(dir + "/partial.params", params), IsOk());
  options.params_path = dir + "/partial.params";
  EXPECT_THAT(RunGraph(rt(), *mlp, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc2_bias' is not in")));
  options.params_path.clear();
  options.inputs["image"] = dir + "/x.npy";
  EXPECT_THAT(RunGraph(rt(), *mlp, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'image'")));
}

TEST_F(RunGraphTest, SeededInitializationIsReproducible) {
  auto mlp = examples::Mlp(1, 8, 3);
  ASSERT_THAT(mlp.status(), IsOk());
  const std::string dir = TempDir() + "/run_seed";
  std::filesystem::create_directories(dir);
  auto x = FromVector<float>(rt(), Shape{2, 5}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  ASSERT_THAT(x.status(), IsOk());
  ASSERT_THAT(SaveNpy(dir + "/x.npy", *x), IsOk());
  std::vector<std::vector<float>> results;
  for (uint64_t seed : {5, 5, 6}) {
    RunGraphOptions options{.inputs = {{"data", dir + "/x.npy"}}, .seed = seed,
                            .output_dir = dir + "/out" + std::to_string(results.size())};
    auto written = RunGraph(rt(), *mlp, options);
    ASSERT_THAT(written.status(), IsOk());
    auto out = LoadNpy(rt(), (*written)[0]);
    ASSERT_THAT(out.status(), IsOk());
    results.push_back(graph::testing::Values(*out));
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_NE(results[0], results[2]);
}

TEST_F(RunGraphTest, RunsOnTheDeviceItIsGiven) {
  auto mlp = examples::Mlp(2, 16, 4);
  ASSERT_THAT(mlp.status(), IsOk());
  const std::string dir = TempDir() + "/run_device";
  std::filesystem::create_directories(dir);
  std::vector<float> x(3 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  auto data = FromVector<float>(rt(), Shape{3, 8}, x);
  ASSERT_THAT(data.status(), IsOk());
  ASSERT_THAT(SaveNpy(dir + "/x.npy", *data), IsOk());
  RunGraphOptions options{.inputs = {{"data", dir + "/x.npy"}}, .seed = 3,
                          .output_dir = dir + "/gpu", .device = Context::GPU(0)};
  if (!tessera::testing::NoGpuReason().empty()) {
    // No device: binding fails, naming it, and nothing is written.
    EXPECT_THAT(RunGraph(rt(), *mlp, options).status(), Not(IsOk()));
    EXPECT_THAT(RunGraph(rt(), *mlp, options).status().message(), HasSubstr("gpu(0)"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/gpu/softmax_output.npy"));
    return;
  }
  auto gpu = RunGraph(rt(), *mlp, options);
  ASSERT_THAT(gpu.status(), IsOk());
  options.device = Context::CPU();
  options.output_dir = dir + "/cpu";
  auto cpu = RunGraph(rt(), *mlp, options);
  ASSERT_THAT(cpu.status(), IsOk());
  auto a = LoadNpy(rt(), (*gpu)[0]), b = LoadNpy(rt(), (*cpu)[0]);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  const std::vector<float> va = graph::testing::Values(*a), vb = graph::testing::Values(*b);
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-5) << i;
}

}  // namespace
}  // namespace tessera::client
