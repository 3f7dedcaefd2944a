// Randomized graphs against a sequential oracle: random DAGs of element-wise, dense,
// splitting, joining, summing and gradient-blocking operators with random multi-use,
// random outputs and random grad_reqs, run (a) on the threaded engine with the reusing,
// in-place memory plan and released values poisoned, and (b) on the naive engine with one
// buffer per value. Outputs and gradients must agree, and every plan must validate.
#include <random>

#include "core/status_matchers.h"
#include "engine/create_engine.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "graph/memory_plan.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::graph {
namespace {

using tessera::testing::IsOk;
using namespace tessera::graph::testing;  // NOLINT(build/namespaces)

constexpr int kWidth = 6;

Symbol Make(const std::string& op, const ops::KwArgs& params, const std::vector<SymbolInput>& inputs) {
  auto s = Symbol::Create(op, params, inputs);
  TESSERA_CHECK(s.ok());
  return *s;
}

// A random network over (batch, kWidth) values.
Symbol RandomGraph(std::mt19937* rng) {
  std::vector<Symbol> pool = {Symbol::Variable("data")};
  const auto pick = [&] { return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(*rng)]; };
  const int steps = std::uniform_int_distribution<int>(3, 14)(*rng);
  for (int step = 0; step < steps; ++step) {
    switch (std::uniform_int_distribution<int>(0, 6)(*rng)) {
      case 0: {
        static const char* kActs[] = {"tanh", "sigmoid", "relu", "softrelu"};
        pool.push_back(Make("Activation", {{"act_type", kActs[(*rng)() % 4]}}, {pick()}));
        break;
      }
      case 1:
        pool.push_back(Make((*rng)() % 2 ? "elemwise_add" : "elemwise_mul", {}, {pick(), pick()}));
        break;
      case 2:
        pool.push_back(Make("FullyConnected", {{"num_hidden", std::to_string(kWidth)}}, {pick()}));
        break;
      case 3:
        pool.push_back(Make("BlockGrad", {}, {pick()}));
        break;
      case 4: {  // split in halves, transform one, join again
        Symbol split = Make("SliceChannel", {{"num_outputs", "2"}, {"axis", "1"}}, {pick()});
        Symbol left = *split[0], right = *split[1];
        if ((*rng)() % 2) left = Make("Activation", {{"act_type", "tanh"}}, {left});
        pool.push_back(Make("Concat", {{"num_args", "2"}, {"dim", "1"}}, {right, left}));
        break;
      }
      case 5:
        pool.push_back(Make("ElementWiseSum", {{"num_args", "3"}}, {pick(), pick(), pick()}));
        break;
      default:
        pool.push_back(Make("Activation", {{"act_type", "tanh"}}, {pool.back()}));
        break;
    }
  }
  std::vector<Symbol> heads = {pool.back()};
  if ((*rng)() % 2) heads.push_back(pick());
  return Symbol::Group(heads);
}

struct Result {
  std::vector<std::vector<float>> outputs, grads;
};

Result TrainTwice(const Runtime& rt, const Symbol& net, const std::vector<OpReqType>& reqs, uint32_t seed,
           const ExecutorOptions& options) {
  std::mt19937 rng(seed);
  auto shapes = net.InferShape({{"data", Shape{3, kWidth}}});
  TESSERA_CHECK(shapes.ok() && shapes->complete);
  std::vector<NDArray> args, grads;
  for (size_t i = 0; i < shapes->arguments.size(); ++i) {
    auto a = Zeros(rt, shapes->arguments[i]);
    auto g = Zeros(rt, shapes->arguments[i]);
    TESSERA_CHECK(a.ok() && g.ok());
    SetRandom(*a, &rng, 0.8f);
    SetRandom(*g, &rng);  // what kAddTo adds to; kWriteTo must overwrite it
    args.push_back(*a);
    grads.push_back(reqs[i] == OpReqType::kNullOp ? NDArray() : *g);
  }
  auto exec = Executor::Bind(rt, net, Context::CPU(), args, grads, reqs, {}, options);
  TESSERA_CHECK(exec.ok());
  EXPECT_EQ(ValidatePlan((*exec)->exec_graph(), (*exec)->memory_plan()), "");
  std::vector<NDArray> head;
  for (const NDArray& out : (*exec)->outputs()) {
    auto h = Zeros(rt, out.shape());
    TESSERA_CHECK(h.ok());
    SetRandom(*h, &rng);
    head.push_back(*h);
  }
  Result r;
  for (int round = 0; round < 2; ++round) {  // twice: reused slots hold stale values
    EXPECT_THAT((*exec)->Forward(true), IsOk());
    if (std::any_of(reqs.begin(), reqs.end(), [](OpReqType r) { return r != OpReqType::kNullOp; })) {
      EXPECT_THAT((*exec)->Backward(head), IsOk());
    }
  }
  for (const NDArray& out : (*exec)->outputs()) r.outputs.push_back(Values(out));
  for (const NDArray& g : grads) r.grads.push_back(g.is_none() ? std::vector<float>() : Values(g));
  return r;
}

TEST(RandomGraphTest, PlannedParallelExecutionMatchesSequentialNoReuseOracle) {
  auto threaded = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  auto naive = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kNaive);
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 60; ++trial) {
    const Symbol net = RandomGraph(&rng);
    std::vector<OpReqType> reqs;
    for (size_t i = 0; i < net.ListArguments().size(); ++i) {
      static const OpReqType kReqs[] = {OpReqType::kWriteTo, OpReqType::kAddTo, OpReqType::kNullOp};
      reqs.push_back(kReqs[rng() % 3]);
    }
    const uint32_t seed = rng();
    const Result oracle = TrainTwice(naive->get(), net, reqs, seed, {.memory = {.reuse = false, .inplace = false}});
    const Result planned = TrainTwice(threaded->get(), net, reqs, seed, {.poison_released = true});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", outputs " << net.ListOutputs()[0]);
    ASSERT_EQ(oracle.outputs.size(), planned.outputs.size());
    for (size_t k = 0; k < oracle.outputs.size(); ++k) {
      for (size_t i = 0; i < oracle.outputs[k].size(); ++i) {
        ASSERT_NEAR(planned.outputs[k][i], oracle.outputs[k][i], 1e-5) << "output " << k << "[" << i << "]";
      }
    }
    for (size_t a = 0; a < oracle.grads.size(); ++a) {
      ASSERT_EQ(oracle.grads[a].size(), planned.grads[a].size());
      for (size_t i = 0; i < oracle.grads[a].size(); ++i) {
        ASSERT_NEAR(planned.grads[a][i], oracle.grads[a][i], 1e-4 * std::max(1.0f, std::abs(oracle.grads[a][i])))
            << "gradient of " << net.ListArguments()[a] << "[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace tessera::graph
