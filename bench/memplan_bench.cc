// memplan_bench: the memory planner's bytes for training the MNIST networks (batch 64),
// against the peer plan with no reuse (one buffer per value), and the executor's training
// step time under both plans, to show reuse costs no speed.
//
//   mlp20  20 hidden layers of 512 (FullyConnected + ReLU), 784 inputs, 10 classes
//   lenet  LeNet on 1x28x28 (examples/models.h)
//
// Bytes are the planned values (activations, their gradients, workspace of hidden
// outputs); arguments, their gradients and auxiliary states are the caller's arrays and
// the same under both plans. Last line: one JSON object with <model>_plan_ratio =
// planned / no-reuse bytes (target <= 0.5).
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "engine/create_engine.h"
#include "examples/models.h"
#include "graph/executor.h"
#include "ndarray/runtime.h"

namespace tessera {
namespace {

using graph::Executor;

std::unique_ptr<Executor> Bind(const Runtime& rt, const graph::Symbol& net, const Shape& data,
                               graph::MemoryPlanOptions memory) {
  graph::SimpleBindOptions options{.shapes = {{"data", data}},
                                   .grad_req_by_name = {{"data", OpReqType::kNullOp},
                                                        {"softmax_label", OpReqType::kNullOp}}};
  options.executor.memory = memory;
  auto exec = Executor::SimpleBind(rt, net, Context::CPU(), options);
  TESSERA_CHECK(exec.ok());
  return std::move(exec).value();
}

// Best-of-5 milliseconds per Forward(train)+Backward, after a warm-up.
double StepMs(Executor& exec) {
  double best = 1e30;
  for (int round = 0; round < 6; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) {
      TESSERA_CHECK(exec.Forward(true).ok());
      TESSERA_CHECK(exec.Backward().ok());
    }
    TESSERA_CHECK(exec.outputs()[0].WaitToRead().ok());
    for (const NDArray& g : exec.grad_arrays()) {
      if (!g.is_none()) TESSERA_CHECK(g.WaitToRead().ok());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5;
    if (round > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace
}  // namespace tessera

int main() {
  using namespace tessera;  // NOLINT(build/namespaces)
  auto rt = OwnedRuntime::Create(engine::EngineOptions{}, engine::StorageOptions{}, 0);
  TESSERA_CHECK(rt.ok());
  auto mlp = examples::Mlp(20, 512);
  auto lenet = examples::LeNet();
  TESSERA_CHECK(mlp.ok() && lenet.ok());
  const std::map<std::string, std::pair<graph::Symbol, Shape>> models = {
      {"mlp20", {*mlp, Shape{64, 784}}}, {"lenet", {*lenet, Shape{64, 1, 28, 28}}}};
  std::string json = "{";
  std::printf("%-6s %14s %14s %7s %12s %12s\n", "model", "planned MiB", "no-reuse MiB", "ratio",
              "step ms", "no-reuse ms");
  for (const auto& [name, model] : models) {
    auto planned = Bind((*rt)->get(), model.first, model.second, {});
    auto peer = Bind((*rt)->get(), model.first, model.second, {.reuse = false, .inplace = false});
    const graph::MemoryPlan& plan = planned->memory_plan();
    TESSERA_CHECK(graph::ValidatePlan(planned->exec_graph(), plan).empty());
    const double ms = StepMs(*planned), peer_ms = StepMs(*peer);
    std::printf("%-6s %14.2f %14.2f %7.3f %12.2f %12.2f\n", name.c_str(), plan.planned_bytes / 1048576.0,
                plan.no_reuse_bytes / 1048576.0, plan.ratio(), ms, peer_ms);
    json += absl::StrFormat(
        "%s\"%s_plan_ratio\": %.4f, \"%s_planned_bytes\": %d, \"%s_no_reuse_bytes\": %d, "
        "\"%s_step_ms\": %.3f, \"%s_no_reuse_step_ms\": %.3f",
        json.size() > 1 ? ", " : "", name, plan.ratio(), name, plan.planned_bytes, name, plan.no_reuse_bytes,
        name, ms, name, peer_ms);
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
