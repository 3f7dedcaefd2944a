// The executor on a GPU: forward and backward of LeNet on gpu(0) against the same executor on
// cpu(0), and CUDA graphs (ExecutorOptions::cuda_graphs): a captured executor gives what an
// uncaptured one gives, batch after batch with new data, and an executor whose nodes draw
// random numbers or that runs on the CPU is not captured and says why. The GPU cases skip
// without a usable GPU; the status cases run everywhere.
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "examples/models.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "tests/gpu_test_util.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::graph {
namespace {

// Whole networks are compared here at 1e-4 (against the CPU) and 1e-5 (captured against
// uncaptured) with cuDNN's heuristic algorithms: a measured choice may take FFT, Winograd or
// atomics-based kernels, whose other rounding flips max pooling's argmax here and there and moves
// single gradients by more than that. nn_gpu_test checks every cudnn_tune per operator.
[[maybe_unused]] const bool kHeuristicAlgorithms = [] {
  return setenv("TESSERA_CUDNN_AUTOTUNE", "0", /*overwrite=*/1) == 0;
}();

using ::testing::HasSubstr;
using tessera::testing::IsOk;
using namespace tessera::graph::testing;  // NOLINT(build/namespaces)

class ExecutorGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() const { return owned_->get(); }

  std::unique_ptr<Executor> Bind(const Symbol& net, Context ctx, bool graphs, int batch = 8) {
    SimpleBindOptions options{.shapes = {{"data", Shape{batch, 1, 28, 28}}}};
    options.executor.cuda_graphs = graphs;
    auto exec = Executor::SimpleBind(rt(), net, ctx, options);
    EXPECT_THAT(exec.status(), IsOk());
    return exec.ok() ? std::move(exec).value() : nullptr;
  }
  // The same seeded values into every argument and auxiliary state of both executors
  // (labels: class indices).
  static void SameInputs(Executor* a, Executor* b, uint32_t seed) {
    std::mt19937 rng(seed);
    for (const auto& [name, array] : a->arg_dict()) {
      std::vector<float> v = RandomValues(array.Size(), &rng, 0.5f);
      if (name.find("label") != std::string::npos) {
        for (float& x : v) x = static_cast<float>(static_cast<int>((x + 0.5f) * 9.99f));
      }
      for (Executor* e : {a, b}) {
        NDArray target = e->arg_dict().at(name);
        ASSERT_THAT(target.SyncCopyFromCPU(v.data(), target.Size()), IsOk());
      }
    }
  }
  static void ExpectNear(const NDArray& got, const NDArray& want, double tol, const std::string& what) {
    const std::vector<float> g = Values(got), w = Values(want);
    ASSERT_EQ(g.size(), w.size()) << what;
    int reported = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (!(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i]))) && reported++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: " << g[i] << " vs " << w[i];
      }
    }
  }
  static void ExpectSameResults(Executor* got, Executor* want, double tol, const std::string& when) {
    for (size_t k = 0; k < want->outputs().size(); ++k) {
      ExpectNear(got->outputs()[k], want->outputs()[k], tol, when + " output");
    }
    const auto g = got->grad_dict(), w = want->grad_dict();
    for (const auto& [name, array] : w) ExpectNear(g.at(name), array, tol, when + " gradient of " + name);
  }

  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(ExecutorGpuTest, LeNetOnTheGpuMatchesTheCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto net = examples::LeNet();
  ASSERT_THAT(net.status(), IsOk());
  auto gpu = Bind(*net, Context::GPU(0), false), cpu = Bind(*net, Context::CPU(), false);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  SameInputs(gpu.get(), cpu.get(), 3);
  for (Executor* e : {gpu.get(), cpu.get()}) {
    ASSERT_THAT(e->Forward(true), IsOk());
    ASSERT_THAT(e->Backward(), IsOk());
  }
  // cuDNN and oneDNN sum convolutions in different orders (TF32 is off).
  ExpectSameResults(gpu.get(), cpu.get(), 1e-4, "LeNet");
}

TEST_F(ExecutorGpuTest, CapturedPassesComputeWhatUncapturedOnesDo) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto net = examples::LeNet();
  ASSERT_THAT(net.status(), IsOk());
  auto captured = Bind(*net, Context::GPU(0), true), plain = Bind(*net, Context::GPU(0), false);
  ASSERT_NE(captured, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(captured->cuda_graph_status(), "warming up");
  EXPECT_EQ(plain->cuda_graph_status(), "off");
  // New data every batch: a replay must read the arrays' current values.
  for (uint32_t batch = 0; batch < 4; ++batch) {
    SameInputs(captured.get(), plain.get(), 100 + batch);
    for (Executor* e : {captured.get(), plain.get()}) {
      ASSERT_THAT(e->Forward(true), IsOk());
      ASSERT_THAT(e->Backward(), IsOk());
    }
    ExpectSameResults(captured.get(), plain.get(), 1e-5, "batch " + std::to_string(batch));
  }
  EXPECT_EQ(captured->cuda_graph_status(), "captured");
  // Inference has its own pass.
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(captured->Forward(false), IsOk());
    ASSERT_THAT(plain->Forward(false), IsOk());
    ExpectNear(captured->outputs()[0], plain->outputs()[0], 1e-5, "inference");
  }
  EXPECT_EQ(captured->cuda_graph_status(), "captured");
}

TEST_F(ExecutorGpuTest, RandomNodesKeepTheExecutorOffGraphs) {
  TESSERA_SKIP_WITHOUT_GPU();
  Symbol x = Symbol::Variable("data");
  auto fc = Symbol::Create("FullyConnected", {{"num_hidden", "4"}}, {x}, "fc");
  ASSERT_THAT(fc.status(), IsOk());
  auto drop = Symbol::Create("Dropout", {{"p", "0.5"}}, {*fc}, "drop1");
  ASSERT_THAT(drop.status(), IsOk());
  SimpleBindOptions options{.shapes = {{"data", Shape{2, 3}}}};
  options.executor.cuda_graphs = true;
  auto exec = Executor::SimpleBind(rt(), *drop, Context::GPU(0), options);
  ASSERT_THAT(exec.status(), IsOk());
  EXPECT_THAT((*exec)->cuda_graph_status(), HasSubstr("'drop1' draws random numbers"));
  ASSERT_THAT((*exec)->Forward(true), IsOk());
  ASSERT_THAT((*exec)->outputs()[0].WaitToRead(), IsOk());
}

TEST_F(ExecutorGpuTest, ACpuExecutorIsNotCapturedAndSaysWhy) {
  auto net = examples::Mlp(1, 8, 3);
  ASSERT_THAT(net.status(), IsOk());
  SimpleBindOptions options{.shapes = {{"data", Shape{2, 5}}}};
  options.executor.cuda_graphs = true;
  auto exec = Executor::SimpleBind(rt(), *net, Context::CPU(), options);
  ASSERT_THAT(exec.status(), IsOk());
  EXPECT_THAT((*exec)->cuda_graph_status(), ::testing::AnyOf(HasSubstr("runs on cpu(0)"),
                                                             HasSubstr("without CUDA")));
  ASSERT_THAT((*exec)->Forward(true), IsOk());
  ASSERT_THAT((*exec)->Backward(), IsOk());
  ASSERT_THAT((*exec)->outputs()[0].WaitToRead(), IsOk());
}

}  // namespace
}  // namespace tessera::graph
