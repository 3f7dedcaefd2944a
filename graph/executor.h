// Executor: a symbol bound to arrays and devices, run as engine pushes. The static
// executor of the seeds: shapes, the gradient graph and a memory plan are fixed at bind
// time; Forward and Backward only push pre-built engine operators, so independent branches
// overlap and the caller's thread never waits.
//
//   ASSIGN_OR_RETURN(auto exec, Executor::SimpleBind(rt, net, Context::CPU(),
//                                                    {.shapes = {{"data", {64, 784}}}}));
//   RETURN_IF_ERROR(exec->Forward(/*is_train=*/true));
//   RETURN_IF_ERROR(exec->Backward());
//   exec->outputs()[0], exec->grad_arrays()[i] ...
//
// Storage: arguments, their gradients and auxiliary states are the caller's arrays; every
// other value lives in slots of the memory plan (graph/memory_plan.h), one engine variable
// per slot. With `poison_released` the executor fills each value's storage with NaN (or
// 0x7f bytes for integers) as soon as the plan says it is dead, so a plan that let two live
// values share storage shows up as wrong results.
//
// Thread safety: drive one Executor from one thread at a time. Failures inside pushed
// kernels surface at the next wait on an output or gradient array.
#ifndef TESSERA_GRAPH_EXECUTOR_H_
#define TESSERA_GRAPH_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "graph/exec_graph.h"
#include "graph/indexed_graph.h"
#include "graph/memory_plan.h"
#include "graph/symbol.h"
#include "ndarray/ndarray.h"

namespace tessera::graph {

struct ExecutorOptions {
  // Devices of "__ctx_group__" attributes (model parallelism); other nodes run on the
  // executor's context.
  std::map<std::string, Context> group2ctx;
  // Debug: poison values once dead (see above).
  bool poison_released = false;
  MemoryPlanOptions memory;
  // On a GPU: run each pass (forward in training, forward in inference, backward) as one
  // engine function whose kernels are captured once into a CUDA graph and replayed
  // (engine/stream_graph.h), as MXNet 2's MXNET_ENABLE_CUDA_GRAPHS, and TrainStep's whole
  // step. Default: on, unless the TESSERA_CUDA_GRAPHS environment variable is "0". Graphs
  // are used only where a replay
  // computes what a fresh run would: every node on the executor's GPU, no operator drawing
  // random numbers (Dropout, rrelu), no model parallelism, no poisoning; otherwise the
  // executor runs operator by operator and cuda_graph_status() says why.
  bool cuda_graphs = CudaGraphsFromEnv();

  static bool CudaGraphsFromEnv();
};

struct SimpleBindOptions {
  // Shapes of some arguments (inputs, typically); the rest are inferred.
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;  // default float32
  OpReqType grad_req = OpReqType::kWriteTo;  // for every argument ...
  std::map<std::string, OpReqType> grad_req_by_name;  // ... except these
  ExecutorOptions executor;
};

class Executor {
 public:
  // Binds `symbol` with `args` (ListArguments order), `arg_grads` (the same order; a none
  // array where `grad_reqs` is kNullOp; may be empty when no gradient is wanted),
  // `grad_reqs` (kNullOp, kWriteTo or kAddTo per argument; empty = all kNullOp) and
  // `aux_states` (ListAuxiliaryStates order). Errors name the argument and both shapes.
  static absl::StatusOr<std::unique_ptr<Executor>> Bind(
      const Runtime& rt, const Symbol& symbol, Context ctx, std::vector<NDArray> args,
      std::vector<NDArray> arg_grads, std::vector<OpReqType> grad_reqs,
      std::vector<NDArray> aux_states, const ExecutorOptions& options = {});

  // Allocates every argument (zero-filled), gradient and auxiliary state from the shapes
  // inference gives; INVALID_ARGUMENT naming what cannot be inferred.
  static absl::StatusOr<std::unique_ptr<Executor>> SimpleBind(const Runtime& rt, const Symbol& symbol,
                                                              Context ctx,
                                                              const SimpleBindOptions& options);

  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Pushes the forward pass. `is_train` selects training behaviour (Dropout, BatchNorm
  // statistics) and is required before Backward.
  absl::Status Forward(bool is_train);
  // Pushes the backward pass. `head_grads`: one array per output, of its shape; empty means
  // ones (outputs of loss operators ignore them).
  absl::Status Backward(const std::vector<NDArray>& head_grads = {});

  // Work appended to a training step's pass (TrainStep): e.g. a fused optimizer update. The
  // body enqueues on the run context's stream only, so it is captured with the pass; `id`
  // names it (a new id rebuilds the pass), reads and writes are its engine variables.
  struct StepEpilogue {
    uintptr_t id = 0;
    std::function<absl::Status(engine::RunContext)> body;
    std::vector<engine::VarHandle> reads, writes;
  };
  // Forward (training), backward with ones as head gradients, then `epilogue`, as ONE engine
  // function and, once warm, one CUDA graph: a whole training step per launch. Only where
  // the passes are captured (can_train_step); otherwise FAILED_PRECONDITION and the caller
  // runs Forward, Backward and its update apart.
  absl::Status TrainStep(const StepEpilogue& epilogue);
  bool can_train_step() const;

  // A new executor for new argument shapes (e.g. another batch size), sharing every
  // argument, gradient and auxiliary array whose shape does not change. Arrays whose shape
  // changes must be named in `shapes` unless `partial_shaping` (as in MXNet); otherwise an
  // argument whose inferred shape would change is INVALID_ARGUMENT naming it. Auxiliary
  // states never change shape.
  absl::StatusOr<std::unique_ptr<Executor>> Reshape(const std::map<std::string, Shape>& shapes,
                                                    bool partial_shaping = false) const;

  const std::vector<NDArray>& outputs() const { return outputs_; }
  const std::vector<NDArray>& arg_arrays() const { return args_; }
  const std::vector<NDArray>& grad_arrays() const { return arg_grads_; }
  const std::vector<NDArray>& aux_arrays() const { return aux_; }
  const std::vector<OpReqType>& grad_reqs() const { return grad_reqs_; }
  std::map<std::string, NDArray> arg_dict() const;
  std::map<std::string, NDArray> grad_dict() const;
  std::map<std::string, NDArray> aux_dict() const;
  const Symbol& symbol() const { return symbol_; }
  const ExecGraph& exec_graph() const { return exec_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  // "off", "captured" (every pass that has run replays a graph), "warming up" (none has run
  // yet, or one has run only once) or why CUDA graphs are not used (e.g. "node 'drop1' draws
  // random numbers"). Read it after waiting for the executor's work (WaitForAll, or reading
  // an output): the passes update it on the engine's threads.
  std::string cuda_graph_status() const;
  // Whether an operator of this executor draws random numbers (Dropout, rrelu): its results
  // then depend on the generators' state, which a trainer reseeds to resume exactly.
  bool draws_random() const;

 private:
  struct NodeState;
  struct Pass;  // one pass as a single engine function (CUDA graphs)
  Executor(const Runtime& rt, Symbol symbol, Context ctx, ExecutorOptions options);
  absl::Status Init(std::vector<NDArray> args, std::vector<NDArray> arg_grads,
                    std::vector<OpReqType> grad_reqs, std::vector<NDArray> aux_states);
  absl::Status AllocateEntries();
  absl::Status BuildNode(uint32_t id);
  absl::Status RunNodes(uint32_t begin, uint32_t end, bool is_train);
  // Backward's head gradients: `head_grads` (checked), or ones when empty.
  absl::Status SetHeadGrads(const std::vector<NDArray>& head_grads);
  // Why the nodes cannot run as captured passes; empty when they can.
  std::string GraphObstacle() const;
  absl::Status BuildPasses();
  // Nodes [begin, end) (and `epilogue`, if any) as one engine function through a StreamGraph.
  absl::StatusOr<std::unique_ptr<Pass>> MakePass(uint32_t begin, uint32_t end, bool is_train,
                                                 const std::string& what, const StepEpilogue* epilogue);
  enum PassIndex { kForwardTrain, kForwardInfer, kBackward, kTrainStep, kNumPasses };
  // This executor's own scratch buffer on `ctx` (engine/resource.h says why not a shared one).
  absl::StatusOr<engine::Resource> TempSpace(Context ctx);

  Runtime rt_;
  Symbol symbol_;
  Context ctx_;
  ExecutorOptions options_;
  std::unique_ptr<IndexedGraph> graph_;
  ExecGraph exec_;
  MemoryPlan plan_;
  std::vector<std::string> arg_names_, aux_names_;  // ListArguments / ListAuxiliaryStates
  std::vector<NDArray> args_, arg_grads_, aux_;
  std::vector<OpReqType> grad_reqs_;
  std::vector<NDArray> slots_;    // one byte buffer per plan slot
  std::vector<NDArray> entries_;  // per exec entry: a view into a slot or a bound array
  std::vector<NDArray> outputs_;
  std::vector<std::unique_ptr<NodeState>> nodes_;
  absl::flat_hash_map<Context, engine::Resource> temp_spaces_;  // private; released at the end
  bool trained_forward_ = false;
  std::string graph_obstacle_;              // why there are no passes (cuda_graphs requested)
  std::unique_ptr<Pass> passes_[kNumPasses];  // null when nodes run one by one
  uintptr_t train_step_epilogue_ = 0;         // the epilogue passes_[kTrainStep] was built with
};

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_EXECUTOR_H_
