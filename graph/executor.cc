#include "graph/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "absl/container/node_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "graph/gradient.h"
#include "graph/infer.h"
#include "engine/stream_graph.h"
#include "ndarray/arithmetic.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "ndarray/cuda/device_math.h"
#endif

namespace tessera::graph {
namespace {

// The engine keeps function names for its whole life; executors come and go.
const char* InternName(const std::string& name) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* names = new absl::node_hash_set<std::string>();
  absl::MutexLock lock(&mu);
  return names->insert(name).first->c_str();
}

absl::Status CheckArray(const std::string& what, const std::string& name, const NDArray& array,
                        const Shape& shape, DType dtype) {
  if (array.is_none()) return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "' is a none array"));
  if (array.shape() != shape || array.dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "' is ", array.shape().ToString(),
                                                   " ", DTypeName(array.dtype()), ", expected ",
                                                   shape.ToString(), " ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

Context VariableContext(const Node& node, Context ctx, const std::map<std::string, Context>& group2ctx) {
  auto it = node.attrs.find("__ctx_group__");
  if (it == node.attrs.end()) return ctx;
  auto g = group2ctx.find(it->second);
  return g == group2ctx.end() ? ctx : g->second;
}

}  // namespace

// What one exec node needs at run time, built once at bind.
struct Executor::NodeState {
  std::shared_ptr<ops::Operator> op;  // kForward/kGradSum; kBackward shares its forward's
  engine::VarHandle op_var;           // orders every use of `op` (it may cache per call)
  bool owns_op = false;               // kBackward states borrow their forward's op and op_var
  engine::OprHandle train, infer;     // pre-built pushes (infer: kForward only)
  // What those pushes run, callable directly (a captured pass calls them in order).
  using Body = std::function<absl::Status(engine::RunContext)>;
  Body train_body, infer_body;
  std::vector<engine::VarHandle> const_vars, mutate_vars;
  bool random = false;  // requests the random resource: a replay would repeat its numbers
};

// One pass run as a single engine function: every node's body in order on one stream,
// through a StreamGraph (captured after the first run).
struct Executor::Pass {
  explicit Pass(std::string name) : graph(std::move(name)) {}
  engine::OprHandle opr;
  engine::StreamGraph graph;
};

Executor::Executor(const Runtime& rt, Symbol symbol, Context ctx, ExecutorOptions options)
    : rt_(rt), symbol_(std::move(symbol)), ctx_(ctx), options_(std::move(options)) {}

Executor::~Executor() {
  for (const std::unique_ptr<Pass>& p : passes_) {
    if (p != nullptr && p->opr) (void)rt_.engine->DeleteOperator(p->opr);
  }
  for (const std::unique_ptr<NodeState>& n : nodes_) {
    if (n == nullptr) continue;
    for (engine::OprHandle h : {n->train, n->infer}) {
      if (h) (void)rt_.engine->DeleteOperator(h);
    }
    if (n->owns_op) (void)rt_.engine->DeleteVariable(nullptr, ctx_, n->op_var);
  }
  for (const auto& [ctx, temp] : temp_spaces_) rt_.resources->ReleasePrivateTempSpace(temp);
}

absl::StatusOr<engine::Resource> Executor::TempSpace(Context ctx) {
  auto it = temp_spaces_.find(ctx);
  if (it != temp_spaces_.end()) return it->second;
  ASSIGN_OR_RETURN(engine::Resource temp, rt_.resources->RequestPrivateTempSpace(ctx));
  temp_spaces_.emplace(ctx, temp);
  return temp;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Bind(
    const Runtime& rt, const Symbol& symbol, Context ctx, std::vector<NDArray> args,
    std::vector<NDArray> arg_grads, std::vector<OpReqType> grad_reqs,
    std::vector<NDArray> aux_states, const ExecutorOptions& options) {
  std::unique_ptr<Executor> exec(new Executor(rt, symbol, ctx, options));
  RETURN_IF_ERROR(exec->Init(std::move(args), std::move(arg_grads), std::move(grad_reqs),
                             std::move(aux_states)));
  return exec;
}

absl::Status Executor::Init(std::vector<NDArray> args, std::vector<NDArray> arg_grads,
                            std::vector<OpReqType> grad_reqs, std::vector<NDArray> aux_states) {
  graph_ = std::make_unique<IndexedGraph>(symbol_.outputs());
  for (uint32_t id : graph_->argument_nodes()) arg_names_.push_back(graph_->node(id).name);
  for (uint32_t id : graph_->aux_nodes()) aux_names_.push_back(graph_->node(id).name);
  const std::vector<std::string>& arg_names = arg_names_;
  const std::vector<std::string>& aux_names = aux_names_;
  if (args.size() != arg_names.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Bind: expected ", arg_names.size(), " arguments (",
                                                   absl::StrJoin(arg_names, ", "), "), got ", args.size()));
  }
  if (aux_states.size() != aux_names.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Bind: expected ", aux_names.size(),
                                                   " auxiliary states (", absl::StrJoin(aux_names, ", "),
                                                   "), got ", aux_states.size()));
  }
  if (grad_reqs.empty()) grad_reqs.assign(args.size(), OpReqType::kNullOp);
  if (grad_reqs.size() != args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Bind: expected ", args.size(), " grad_reqs, got ",
                                                   grad_reqs.size()));
  }
  if (arg_grads.empty()) arg_grads.resize(args.size());
  if (arg_grads.size() != args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Bind: expected ", args.size(),
                                                   " gradient arrays, got ", arg_grads.size()));
  }
  // Inference from the bound arrays; their shapes are facts, so any conflict is an error.
  std::vector<Shape> shapes(graph_->num_entries());
  std::vector<DType> types(graph_->num_entries(), DType::kUnknown);
  const auto seed = [&](const std::vector<uint32_t>& nodes, const std::vector<NDArray>& arrays,
                        const std::vector<std::string>& names, const char* what) -> absl::Status {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (arrays[i].is_none()) {
        return absl::InvalidArgumentError(absl::StrCat("Bind: ", what, " '", names[i], "' is a none array"));
      }
      shapes[graph_->entry_id(nodes[i], 0)] = arrays[i].shape();
      types[graph_->entry_id(nodes[i], 0)] = arrays[i].dtype();
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(seed(graph_->argument_nodes(), args, arg_names, "argument"));
  RETURN_IF_ERROR(seed(graph_->aux_nodes(), aux_states, aux_names, "auxiliary state"));
  RETURN_IF_ERROR(InferShapes(*graph_, &shapes));
  RETURN_IF_ERROR(InferTypes(*graph_, &types));
  for (uint32_t id = 0; id < graph_->num_nodes(); ++id) {
    for (int i = 0; i < graph_->node(id).num_outputs(); ++i) {
      const uint32_t e = graph_->entry_id(id, i);
      if (!shapes[e].is_known() || types[e] == DType::kUnknown) {
        return absl::InvalidArgumentError(absl::StrCat("Bind: cannot infer the ",
                                                       shapes[e].is_known() ? "type" : "shape", " of '",
                                                       graph_->node(id).OutputName(i), "'"));
      }
    }
  }
  for (size_t a = 0; a < args.size(); ++a) {
    if (grad_reqs[a] == OpReqType::kWriteInplace) grad_reqs[a] = OpReqType::kWriteTo;
    if (grad_reqs[a] == OpReqType::kNullOp) continue;
    RETURN_IF_ERROR(CheckArray("gradient of", arg_names[a], arg_grads[a], args[a].shape(), args[a].dtype()));
    if (arg_grads[a].ctx() != args[a].ctx()) {
      return absl::InvalidArgumentError(absl::StrCat("Bind: the gradient of '", arg_names[a], "' is on ",
                                                     arg_grads[a].ctx().ToString(), " but the argument on ",
                                                     args[a].ctx().ToString()));
    }
  }
  args_ = std::move(args);
  arg_grads_ = std::move(arg_grads);
  aux_ = std::move(aux_states);
  grad_reqs_ = std::move(grad_reqs);

  ExecGraphOptions build{.default_ctx = ctx_, .group2ctx = options_.group2ctx, .grad_req = grad_reqs_};
  for (const NDArray& a : args_) build.argument_ctx.push_back(a.ctx());
  for (const NDArray& a : aux_) build.aux_ctx.push_back(a.ctx());
  ASSIGN_OR_RETURN(exec_, BuildExecGraph(*graph_, shapes, types, build));
  plan_ = PlanMemory(exec_, options_.memory);
  RETURN_IF_ERROR(AllocateEntries());
  nodes_.resize(exec_.nodes.size());
  for (uint32_t id = 0; id < exec_.nodes.size(); ++id) RETURN_IF_ERROR(BuildNode(id));
  for (uint32_t e : exec_.outputs) outputs_.push_back(entries_[e]);
  if (options_.cuda_graphs) {
    graph_obstacle_ = GraphObstacle();
    if (graph_obstacle_.empty()) RETURN_IF_ERROR(BuildPasses());
  }
  return absl::OkStatus();
}

bool ExecutorOptions::CudaGraphsFromEnv() { return engine::StreamGraph::EnabledByEnv(); }

std::string Executor::GraphObstacle() const {
#if !TESSERA_USE_CUDA
  return "Tessera was built without CUDA";
#endif
  if (!ctx_.is_gpu()) return absl::StrCat("the executor runs on ", ctx_.ToString());
  if (!options_.group2ctx.empty()) return "model parallelism (group2ctx) spans devices";
  if (options_.poison_released) return "poison_released fills dead values between operators";
  for (uint32_t id = 0; id < exec_.nodes.size(); ++id) {
    const ExecNode& node = exec_.nodes[id];
    if (node.kind == ExecNodeKind::kCopy) {
      return absl::StrCat("node '", node.name, "' copies between devices");
    }
    if (node.kind == ExecNodeKind::kVariable || node.kind == ExecNodeKind::kHeadGrad) continue;
    if (node.ctx != ctx_) {
      return absl::StrCat("node '", node.name, "' runs on ", node.ctx.ToString());
    }
    if (nodes_[id] != nullptr && nodes_[id]->random) {
      return absl::StrCat("node '", node.name, "' draws random numbers");
    }
  }
  return "";
}

bool Executor::draws_random() const {
  for (const std::unique_ptr<NodeState>& node : nodes_) {
    if (node != nullptr && node->random) return true;
  }
  return false;
}

absl::Status Executor::BuildPasses() {
  const uint32_t num_nodes = static_cast<uint32_t>(exec_.nodes.size());
  if (exec_.num_forward_nodes > 0) {
    ASSIGN_OR_RETURN(passes_[kForwardTrain], MakePass(0, exec_.num_forward_nodes, true, "forward", nullptr));
    ASSIGN_OR_RETURN(passes_[kForwardInfer], MakePass(0, exec_.num_forward_nodes, false, "forward_infer", nullptr));
  }
  if (num_nodes > exec_.num_forward_nodes) {
    ASSIGN_OR_RETURN(passes_[kBackward], MakePass(exec_.num_forward_nodes, num_nodes, true, "backward", nullptr));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor::Pass>> Executor::MakePass(uint32_t begin, uint32_t end, bool is_train,
                                                                   const std::string& what,
                                                                   const StepEpilogue* epilogue) {
  // The union of the nodes' variables: written by any node means mutated by the pass.
  std::vector<engine::VarHandle> reads, writes;
  const auto contains = [](const std::vector<engine::VarHandle>& list, engine::VarHandle v) {
    return std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<std::function<absl::Status(engine::RunContext)>> steps;
  for (uint32_t id = begin; id < end; ++id) {
    const ExecNode& node = exec_.nodes[id];
    if (node.kind == ExecNodeKind::kZeros) {
      const TBlob out = entries_[node.first_output].data();
      for (engine::VarHandle v : {entries_[node.first_output].var()}) {
        if (!contains(writes, v)) writes.push_back(v);
      }
      steps.push_back([out](engine::RunContext rc) -> absl::Status {
#if TESSERA_USE_CUDA
        return gpu_math::Fill(out, 0.0, rc.get_stream<cudaStream_t>());
#else
        return absl::FailedPreconditionError("a GPU pass without CUDA");
#endif
      });
      continue;
    }
    if (nodes_[id] == nullptr) continue;  // variables and head gradients: nothing to run
    const NodeState& state = *nodes_[id];
    for (engine::VarHandle v : state.mutate_vars) {
      if (!contains(writes, v)) writes.push_back(v);
    }
    for (engine::VarHandle v : state.const_vars) {
      if (!contains(reads, v)) reads.push_back(v);
    }
    const bool infer = node.kind == ExecNodeKind::kForward && !is_train;
    steps.push_back(infer ? state.infer_body : state.train_body);
  }
  if (epilogue != nullptr) {
    for (engine::VarHandle v : epilogue->writes) {
      if (!contains(writes, v)) writes.push_back(v);
    }
    for (engine::VarHandle v : epilogue->reads) {
      if (!contains(reads, v)) reads.push_back(v);
    }
    steps.push_back(epilogue->body);
  }
  reads.erase(std::remove_if(reads.begin(), reads.end(), [&](engine::VarHandle v) { return contains(writes, v); }),
              reads.end());
  const std::string name = absl::StrCat(what, " pass (CUDA graph)");
  auto pass = std::make_unique<Pass>(name);
  engine::StreamGraph* graph = &pass->graph;
  auto fn = [graph, steps = std::move(steps)](engine::RunContext rc, engine::CallbackOnComplete done) {
    done(graph->Run(rc.stream, [&]() -> absl::Status {
      for (const auto& step : steps) RETURN_IF_ERROR(step(rc));
      return absl::OkStatus();
    }));
  };
  ASSIGN_OR_RETURN(pass->opr, rt_.engine->NewOperator(std::move(fn), reads, writes, engine::FnProperty::kNormal,
                                                      InternName(name)));
  return pass;
}

std::string Executor::cuda_graph_status() const {
  if (!options_.cuda_graphs) return "off";
  if (!graph_obstacle_.empty()) return graph_obstacle_;
  bool any_ran = false, all_captured = true, any_disabled = false;
  for (const std::unique_ptr<Pass>& p : passes_) {
    // A pass never run (e.g. inference during training) is not waiting for anything.
    if (p == nullptr || !p->graph.ran()) continue;
    any_ran = true;
    all_captured = all_captured && p->graph.captured();
    any_disabled = any_disabled || p->graph.disabled();
  }
  if (any_disabled) return "capture failed (see the log); running operator by operator";
  return any_ran && all_captured ? "captured" : "warming up";
}

absl::Status Executor::AllocateEntries() {
  for (const MemoryPlan::Slot& slot : plan_.slots) {
    ASSIGN_OR_RETURN(NDArray buffer, NDArray::Empty(rt_, Shape{std::max<int64_t>(slot.bytes, 1)},
                                                    slot.ctx, DType::kUInt8));
    slots_.push_back(std::move(buffer));
  }
  entries_.resize(exec_.entries.size());
  for (size_t a = 0; a < exec_.argument_entries.size(); ++a) entries_[exec_.argument_entries[a]] = args_[a];
  for (size_t a = 0; a < exec_.aux_entries.size(); ++a) entries_[exec_.aux_entries[a]] = aux_[a];
  for (size_t a = 0; a < exec_.gradient_entries.size(); ++a) {
    if (exec_.gradient_entries[a] != kNoEntry) entries_[exec_.gradient_entries[a]] = arg_grads_[a];
  }
  for (uint32_t e : exec_.head_grad_entries) {
    if (e == kNoEntry) continue;
    ASSIGN_OR_RETURN(entries_[e], NDArray::Empty(rt_, exec_.entries[e].shape, exec_.entries[e].ctx,
                                                 exec_.entries[e].dtype));
  }
  for (uint32_t e = 0; e < exec_.entries.size(); ++e) {
    if (plan_.storage[e] < 0) continue;
    ASSIGN_OR_RETURN(entries_[e], slots_[plan_.storage[e]].ViewAs(exec_.entries[e].shape, exec_.entries[e].dtype));
  }
  return absl::OkStatus();
}

absl::Status Executor::BuildNode(uint32_t id) {
  const ExecNode& node = exec_.nodes[id];
  if (node.kind != ExecNodeKind::kForward && node.kind != ExecNodeKind::kBackward &&
      node.kind != ExecNodeKind::kGradSum) {
    return absl::OkStatus();
  }
  auto state = std::make_unique<NodeState>();
  const auto blob = [&](uint32_t e) { return e == kNoEntry ? TBlob() : entries_[e].data(); };
  const auto blobs = [&](const std::vector<uint32_t>& list) {
    std::vector<TBlob> out;
    for (uint32_t e : list) out.push_back(blob(e));
    return out;
  };
  std::vector<uint32_t> outputs;
  std::vector<OpReqType> req;
  for (uint32_t o = 0; o < node.num_outputs; ++o) {
    const uint32_t e = node.first_output + o;
    outputs.push_back(e);
    req.push_back(plan_.inplace[e] ? OpReqType::kWriteInplace : exec_.entries[e].req);
  }
  std::vector<engine::VarHandle> const_vars, mutate_vars;
  for (uint32_t e : node.inputs) const_vars.push_back(entries_[e].var());
  for (uint32_t e : outputs) mutate_vars.push_back(entries_[e].var());

  if (node.kind == ExecNodeKind::kBackward) {
    NodeState& fwd = *nodes_[node.forward_exec_id];
    state->op = fwd.op;
    state->op_var = fwd.op_var;
  } else {
    absl::StatusOr<std::unique_ptr<ops::Operator>> op = node.op->CreateOperator(node.ctx);
    if (!op.ok()) {
      // Refused at bind time, naming the node: e.g. an operator with no GPU kernel.
      return absl::Status(op.status().code(),
                          absl::StrCat("node '", node.name, "': ", op.status().message()));
    }
    state->op = std::move(op).value();
    state->op_var = rt_.engine->NewVariable();
    state->owns_op = true;
  }
  mutate_vars.push_back(state->op_var);

  const ExecNode& fnode = node.kind == ExecNodeKind::kBackward ? exec_.nodes[node.forward_exec_id] : node;
  std::vector<Shape> in_shapes;
  for (uint32_t e : fnode.inputs) in_shapes.push_back(exec_.entries[e].shape);
  std::vector<engine::Resource> resources;
  for (const engine::ResourceRequest& r : node.kind == ExecNodeKind::kBackward ? node.op->BackwardResource(in_shapes)
                                                                      : node.op->ForwardResource(in_shapes)) {
    absl::StatusOr<engine::Resource> res = r.type == engine::ResourceRequest::kTempSpace
                                               ? TempSpace(node.ctx)
                                               : rt_.resources->Request(node.ctx, r);
    if (!res.ok()) return res.status();
    resources.push_back(*res);
    mutate_vars.push_back(res->var);
    if (r.type == engine::ResourceRequest::kRandom) state->random = true;
  }
  std::vector<TBlob> aux = blobs(fnode.aux);
  for (uint32_t e : fnode.aux) {
    (node.kind == ExecNodeKind::kForward ? mutate_vars : const_vars).push_back(entries_[e].var());
  }
  std::shared_ptr<ops::Operator> op = state->op;
  const char* name = InternName(node.name);
  const auto make = [&](const NodeState::Body& body) {
    auto fn = [body](engine::RunContext rc, engine::CallbackOnComplete done) { done(body(rc)); };
    return rt_.engine->NewOperator(std::move(fn), const_vars, mutate_vars, engine::FnProperty::kNormal, name);
  };
  if (node.kind == ExecNodeKind::kBackward) {
    state->train_body = [op, resources, out_grad = blobs(node.out_grad), in_data = blobs(node.in_data),
                         out_data = blobs(node.out_data), req, in_grad = blobs(outputs),
                         aux](engine::RunContext rc) {
      const ops::OpContext ctx{.is_train = true, .run_ctx = rc, .requested = resources};
      return op->Backward(ctx, out_grad, in_data, out_data, req, in_grad, aux);
    };
    ASSIGN_OR_RETURN(state->train, make(state->train_body));
  } else {
    for (bool is_train : {true, false}) {
      NodeState::Body body = [op, resources, in = blobs(node.inputs), req, out = blobs(outputs), aux,
                              is_train](engine::RunContext rc) {
        const ops::OpContext ctx{.is_train = is_train, .run_ctx = rc, .requested = resources};
        return op->Forward(ctx, in, req, out, aux);
      };
      engine::OprHandle& handle = is_train ? state->train : state->infer;
      ASSIGN_OR_RETURN(handle, make(body));
      (is_train ? state->train_body : state->infer_body) = std::move(body);
    }
  }
  state->const_vars = std::move(const_vars);
  state->mutate_vars = std::move(mutate_vars);
  nodes_[id] = std::move(state);
  return absl::OkStatus();
}

absl::Status Executor::RunNodes(uint32_t begin, uint32_t end, bool is_train) {
  const int index = begin > 0 ? kBackward : (is_train ? kForwardTrain : kForwardInfer);
  if (const std::unique_ptr<Pass>& pass = passes_[index]; pass != nullptr) {
    return rt_.engine->Push(pass->opr, ctx_);
  }
  for (uint32_t id = begin; id < end; ++id) {
    const ExecNode& node = exec_.nodes[id];
    switch (node.kind) {
      case ExecNodeKind::kForward:
        RETURN_IF_ERROR(rt_.engine->Push(is_train ? nodes_[id]->train : nodes_[id]->infer, node.ctx));
        break;
      case ExecNodeKind::kBackward:
      case ExecNodeKind::kGradSum:
        RETURN_IF_ERROR(rt_.engine->Push(nodes_[id]->train, node.ctx));
        break;
      case ExecNodeKind::kCopy:
        RETURN_IF_ERROR(CopyFromTo(entries_[node.inputs[0]], entries_[node.first_output]));
        break;
      case ExecNodeKind::kZeros:
        RETURN_IF_ERROR(Fill(entries_[node.first_output], 0.0));
        break;
      case ExecNodeKind::kVariable:
      case ExecNodeKind::kHeadGrad:
        break;
    }
    if (options_.poison_released) {
      for (uint32_t e : plan_.released_after[id]) {
        const bool is_float = IsFloatingPoint(exec_.entries[e].dtype);
        RETURN_IF_ERROR(Fill(entries_[e], is_float ? std::numeric_limits<double>::quiet_NaN() : 127.0));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Forward(bool is_train) {
  RETURN_IF_ERROR(RunNodes(0, exec_.num_forward_nodes, is_train));
  trained_forward_ = is_train;
  return absl::OkStatus();
}

absl::Status Executor::Backward(const std::vector<NDArray>& head_grads) {
  if (std::all_of(grad_reqs_.begin(), grad_reqs_.end(), [](OpReqType r) { return r == OpReqType::kNullOp; })) {
    return absl::FailedPreconditionError("Backward: the executor was bound without gradients (every grad_req is null)");
  }
  if (!trained_forward_) {
    return absl::FailedPreconditionError("Backward: run Forward(is_train=true) first");
  }
  const std::vector<std::string> names = symbol_.ListOutputs();
  if (!head_grads.empty() && head_grads.size() != exec_.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Backward: expected ", exec_.outputs.size(),
                                                   " head gradients (", absl::StrJoin(names, ", "),
                                                   "), got ", head_grads.size()));
  }
  RETURN_IF_ERROR(SetHeadGrads(head_grads));
  return RunNodes(exec_.num_forward_nodes, static_cast<uint32_t>(exec_.nodes.size()), true);
}

absl::Status Executor::SetHeadGrads(const std::vector<NDArray>& head_grads) {
  const std::vector<std::string> names = head_grads.empty() ? std::vector<std::string>() : symbol_.ListOutputs();
  for (size_t k = 0; k < exec_.head_grad_entries.size(); ++k) {
    const uint32_t e = exec_.head_grad_entries[k];
    if (e == kNoEntry) continue;
    if (head_grads.empty()) {
      RETURN_IF_ERROR(Fill(entries_[e], 1.0));
      continue;
    }
    RETURN_IF_ERROR(CheckArray("head gradient for", names[k], head_grads[k], exec_.entries[e].shape,
                               exec_.entries[e].dtype));
    RETURN_IF_ERROR(CopyFromTo(head_grads[k], entries_[e]));
  }
  return absl::OkStatus();
}

bool Executor::can_train_step() const {
  return passes_[kBackward] != nullptr &&
         std::any_of(grad_reqs_.begin(), grad_reqs_.end(), [](OpReqType r) { return r != OpReqType::kNullOp; });
}

absl::Status Executor::TrainStep(const StepEpilogue& epilogue) {
  if (!can_train_step()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainStep: the executor runs its operators one by one (CUDA graphs: ", cuda_graph_status(),
        ") or has no gradients; run Forward and Backward"));
  }
  if (passes_[kTrainStep] == nullptr || train_step_epilogue_ != epilogue.id) {
    if (passes_[kTrainStep] != nullptr) RETURN_IF_ERROR(rt_.engine->DeleteOperator(passes_[kTrainStep]->opr));
    passes_[kTrainStep].reset();
    ASSIGN_OR_RETURN(passes_[kTrainStep],
                     MakePass(0, static_cast<uint32_t>(exec_.nodes.size()), true, "train step", &epilogue));
    train_step_epilogue_ = epilogue.id;
  }
  RETURN_IF_ERROR(SetHeadGrads({}));
  trained_forward_ = true;
  return rt_.engine->Push(passes_[kTrainStep]->opr, ctx_);
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::SimpleBind(const Runtime& rt, const Symbol& symbol,
                                                               Context ctx,
                                                               const SimpleBindOptions& options) {
  ASSIGN_OR_RETURN(InferResult<Shape> shapes, symbol.InferShape(options.shapes));
  std::map<std::string, DType> known_types = options.dtypes;
  const std::vector<std::string> arg_names = symbol.ListArguments();
  const std::vector<std::string> aux_names = symbol.ListAuxiliaryStates();
  std::vector<std::string> unknown;
  for (size_t i = 0; i < arg_names.size(); ++i) {
    if (!shapes.arguments[i].is_known()) unknown.push_back(arg_names[i]);
    known_types.try_emplace(arg_names[i], DType::kFloat32);
  }
  for (size_t i = 0; i < aux_names.size(); ++i) {
    if (!shapes.aux_states[i].is_known()) unknown.push_back(aux_names[i]);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("SimpleBind: cannot infer the shapes of ",
                                                   absl::StrJoin(unknown, ", "), "; give more input shapes"));
  }
  ASSIGN_OR_RETURN(InferResult<DType> types, symbol.InferType(known_types));
  IndexedGraph graph(symbol.outputs());
  std::vector<NDArray> args, grads, aux;
  std::vector<OpReqType> reqs;
  for (size_t i = 0; i < arg_names.size(); ++i) {
    const Context where = VariableContext(graph.node(graph.argument_nodes()[i]), ctx, options.executor.group2ctx);
    ASSIGN_OR_RETURN(NDArray arg, Zeros(rt, shapes.arguments[i], where, types.arguments[i]));
    auto it = options.grad_req_by_name.find(arg_names[i]);
    const OpReqType req = it == options.grad_req_by_name.end() ? options.grad_req : it->second;
    NDArray grad;
    if (req != OpReqType::kNullOp) {
      ASSIGN_OR_RETURN(grad, Zeros(rt, shapes.arguments[i], where, types.arguments[i]));
    }
    args.push_back(std::move(arg));
    grads.push_back(std::move(grad));
    reqs.push_back(req);
  }
  for (size_t i = 0; i < aux_names.size(); ++i) {
    const Context where = VariableContext(graph.node(graph.aux_nodes()[i]), ctx, options.executor.group2ctx);
    ASSIGN_OR_RETURN(NDArray a, Zeros(rt, shapes.aux_states[i], where, types.aux_states[i]));
    aux.push_back(std::move(a));
  }
  return Bind(rt, symbol, ctx, std::move(args), std::move(grads), std::move(reqs), std::move(aux),
              options.executor);
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Reshape(const std::map<std::string, Shape>& shapes,
                                                            bool partial_shaping) const {
  const std::vector<std::string>& arg_names = arg_names_;
  const std::vector<std::string>& aux_names = aux_names_;
  ASSIGN_OR_RETURN(InferResult<Shape> first, symbol_.InferShape(shapes));
  // Arguments inference cannot reach keep their shapes (e.g. a label beside new data).
  std::map<std::string, Shape> known = shapes;
  for (size_t i = 0; i < arg_names.size(); ++i) {
    if (!first.arguments[i].is_known()) known.emplace(arg_names[i], args_[i].shape());
  }
  ASSIGN_OR_RETURN(InferResult<Shape> inferred, symbol_.InferShape(known));
  std::vector<NDArray> args, grads, aux;
  for (size_t i = 0; i < arg_names.size(); ++i) {
    const Shape& s = inferred.arguments[i];
    if (s == args_[i].shape()) {
      args.push_back(args_[i]);
      grads.push_back(arg_grads_[i]);
      continue;
    }
    if (!shapes.contains(arg_names[i]) && !partial_shaping) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: argument '", arg_names[i], "' would change shape from ",
                                                     args_[i].shape().ToString(), " to ", s.ToString(),
                                                     "; name it, or allow partial shaping"));
    }
    ASSIGN_OR_RETURN(NDArray arg, Zeros(rt_, s, args_[i].ctx(), args_[i].dtype()));
    NDArray grad;
    if (grad_reqs_[i] != OpReqType::kNullOp) {
      ASSIGN_OR_RETURN(grad, Zeros(rt_, s, args_[i].ctx(), args_[i].dtype()));
    }
    args.push_back(std::move(arg));
    grads.push_back(std::move(grad));
  }
  for (size_t i = 0; i < aux_names.size(); ++i) {
    if (inferred.aux_states[i] != aux_[i].shape()) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: auxiliary state '", aux_names[i],
                                                     "' would change shape from ", aux_[i].shape().ToString(),
                                                     " to ", inferred.aux_states[i].ToString()));
    }
    aux.push_back(aux_[i]);
  }
  return Bind(rt_, symbol_, ctx_, std::move(args), std::move(grads), grad_reqs_, std::move(aux), options_);
}

namespace {
std::map<std::string, NDArray> Dict(const std::vector<std::string>& names, const std::vector<NDArray>& arrays) {
  std::map<std::string, NDArray> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!arrays[i].is_none()) out[names[i]] = arrays[i];
  }
  return out;
}
}  // namespace

std::map<std::string, NDArray> Executor::arg_dict() const { return Dict(arg_names_, args_); }
std::map<std::string, NDArray> Executor::grad_dict() const { return Dict(arg_names_, arg_grads_); }
std::map<std::string, NDArray> Executor::aux_dict() const { return Dict(aux_names_, aux_); }

}  // namespace tessera::graph
