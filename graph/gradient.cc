#include "graph/gradient.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/registry.h"

namespace tessera::graph {
namespace {

bool StopsGradient(const Node& node) {
  return !node.is_variable() && (node.OpName() == "BlockGrad" || node.OpName() == "stop_gradient");
}

class ExecGraphBuilder {
 public:
  ExecGraphBuilder(const IndexedGraph& graph, const std::vector<Shape>& shapes,
                   const std::vector<DType>& types, const ExecGraphOptions& options)
      : graph_(graph), shapes_(shapes), types_(types), options_(options) {}

  absl::StatusOr<ExecGraph> Build() {
    RETURN_IF_ERROR(BuildForward());
    const bool backward = std::any_of(options_.grad_req.begin(), options_.grad_req.end(),
                                      [](OpReqType r) { return r != OpReqType::kNullOp; });
    exec_.gradient_entries.assign(graph_.argument_nodes().size(), kNoEntry);
    exec_.head_grad_entries.assign(exec_.outputs.size(), kNoEntry);
    if (backward) RETURN_IF_ERROR(BuildBackward());
    return std::move(exec_);
  }

 private:
  struct Out {
    Shape shape;
    DType dtype;
  };

  uint32_t AddNode(ExecNode node, const std::vector<Out>& outs, bool external = false) {
    const uint32_t id = static_cast<uint32_t>(exec_.nodes.size());
    node.first_output = static_cast<uint32_t>(exec_.entries.size());
    node.num_outputs = static_cast<uint32_t>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      exec_.entries.push_back({id, static_cast<uint32_t>(i), outs[i].shape, outs[i].dtype, node.ctx});
      exec_.external.push_back(external);
    }
    exec_.nodes.push_back(std::move(node));
    return id;
  }

  Out OutOf(uint32_t entry) const { return {exec_.entries[entry].shape, exec_.entries[entry].dtype}; }

  // `entry` as seen on `ctx`: itself, or (once per device) a copy.
  uint32_t OnContext(uint32_t entry, Context ctx) {
    if (exec_.entries[entry].ctx == ctx) return entry;
    auto key = std::make_pair(entry, ctx.ToString());
    if (auto it = copies_.find(key); it != copies_.end()) return it->second;
    ExecNode copy{.kind = ExecNodeKind::kCopy,
                  .name = absl::StrCat(NameOf(entry), "_to_", ctx.ToString()),
                  .ctx = ctx};
    copy.inputs = {entry};
    const uint32_t out = exec_.nodes[AddNode(std::move(copy), {OutOf(entry)})].first_output;
    copies_[key] = out;
    return out;
  }

  std::string NameOf(uint32_t entry) const {
    const ExecEntry& e = exec_.entries[entry];
    const ExecNode& n = exec_.nodes[e.node];
    return n.num_outputs == 1 ? n.name : absl::StrCat(n.name, "_", e.index);
  }

  Context PlaceOperator(const Node& node) const {
    auto it = node.attrs.find("__ctx_group__");
    if (it != node.attrs.end()) {
      if (auto g = options_.group2ctx.find(it->second); g != options_.group2ctx.end()) return g->second;
    }
    return options_.default_ctx;
  }

  absl::Status BuildForward() {
    to_exec_.assign(graph_.num_entries(), kNoEntry);
    absl::flat_hash_map<uint32_t, size_t> arg_index, aux_index;
    for (size_t i = 0; i < graph_.argument_nodes().size(); ++i) arg_index[graph_.argument_nodes()[i]] = i;
    for (size_t i = 0; i < graph_.aux_nodes().size(); ++i) aux_index[graph_.aux_nodes()[i]] = i;
    exec_.argument_entries.resize(arg_index.size());
    exec_.aux_entries.resize(aux_index.size());
    for (uint32_t id = 0; id < graph_.num_nodes(); ++id) {
      const Node& node = graph_.node(id);
      std::vector<Out> outs;
      for (int i = 0; i < node.num_outputs(); ++i) {
        const uint32_t e = graph_.entry_id(id, i);
        outs.push_back({shapes_[e], types_[e]});
      }
      if (node.is_variable()) {
        const bool is_arg = arg_index.contains(id);
        const size_t index = is_arg ? arg_index[id] : aux_index[id];
        const std::vector<Context>& where = is_arg ? options_.argument_ctx : options_.aux_ctx;
        ExecNode var{.kind = ExecNodeKind::kVariable, .name = node.name,
                     .ctx = index < where.size() ? where[index] : options_.default_ctx, .source = id};
        const uint32_t entry = exec_.nodes[AddNode(std::move(var), outs, /*external=*/true)].first_output;
        (is_arg ? exec_.argument_entries : exec_.aux_entries)[index] = entry;
        to_exec_[graph_.entry_id(id, 0)] = entry;
        continue;
      }
      ExecNode fwd{.kind = ExecNodeKind::kForward, .name = node.name, .ctx = PlaceOperator(node),
                   .op = node.op, .source = id};
      const std::vector<uint32_t>& inputs = graph_.inputs(id);
      for (size_t i = 0; i < inputs.size(); ++i) {
        const uint32_t e = to_exec_[inputs[i]];
        if (static_cast<int>(i) < node.num_arguments()) {
          fwd.inputs.push_back(OnContext(e, fwd.ctx));
        } else if (exec_.entries[e].ctx != fwd.ctx) {
          return absl::InvalidArgumentError(absl::StrCat(
              "node '", node.name, "' (", node.OpName(), ") runs on ", fwd.ctx.ToString(),
              " but its auxiliary state '", NameOf(e), "' is on ", exec_.entries[e].ctx.ToString()));
        } else {
          fwd.aux.push_back(e);
        }
      }
      const uint32_t exec_id = AddNode(std::move(fwd), outs);
      forward_exec_id_[id] = exec_id;
      for (int i = 0; i < node.num_outputs(); ++i) to_exec_[graph_.entry_id(id, i)] = exec_.Entry(exec_id, i);
    }
    for (uint32_t e : graph_.output_entries()) exec_.outputs.push_back(to_exec_[e]);
    exec_.num_forward_nodes = static_cast<uint32_t>(exec_.nodes.size());
    return absl::OkStatus();
  }

  // Which forward entries lead back to an argument that wants a gradient.
  std::vector<bool> NeedGrad() const {
    std::vector<bool> need(graph_.num_entries(), false);
    for (size_t a = 0; a < graph_.argument_nodes().size(); ++a) {
      if (a < options_.grad_req.size() && options_.grad_req[a] != OpReqType::kNullOp) {
        need[graph_.entry_id(graph_.argument_nodes()[a], 0)] = true;
      }
    }
    for (uint32_t id = 0; id < graph_.num_nodes(); ++id) {
      const Node& node = graph_.node(id);
      if (node.is_variable() || StopsGradient(node)) continue;
      bool any = false;
      for (int i = 0; i < node.num_arguments(); ++i) any = any || need[graph_.inputs(id)[i]];
      for (int i = 0; i < node.num_outputs(); ++i) need[graph_.entry_id(id, i)] = any;
    }
    return need;
  }

  // The sum of `contribs` on `ctx` (kNoEntry when there are none). `force_node` makes a
  // node even for one contribution, so the result can be written into a bound array.
  absl::StatusOr<uint32_t> Aggregate(const std::vector<uint32_t>& contribs, Context ctx,
                                     const std::string& name, bool force_node) {
    if (contribs.empty()) return kNoEntry;
    std::vector<uint32_t> local;
    for (uint32_t c : contribs) local.push_back(OnContext(c, ctx));
    if (local.size() == 1 && !force_node) return local[0];
    ASSIGN_OR_RETURN(std::unique_ptr<ops::OperatorProperty> sum,
                     ops::OpRegistry::Global().Create(
                         "ElementWiseSum", {{"num_args", absl::StrCat(local.size())}}));
    ExecNode node{.kind = ExecNodeKind::kGradSum, .name = name, .ctx = ctx, .op = std::move(sum)};
    node.inputs = local;
    return exec_.nodes[AddNode(std::move(node), {OutOf(local[0])})].first_output;
  }

  uint32_t Zeros(const Out& out, Context ctx, const std::string& name, bool external) {
    ExecNode node{.kind = ExecNodeKind::kZeros, .name = name, .ctx = ctx};
    return exec_.nodes[AddNode(std::move(node), {out}, external)].first_output;
  }

  absl::Status BuildBackward() {
    const std::vector<bool> need = NeedGrad();
    contributions_.assign(graph_.num_entries(), {});
    const std::vector<uint32_t> heads = graph_.output_entries();
    for (size_t k = 0; k < heads.size(); ++k) {
      if (!need[heads[k]]) continue;
      const uint32_t out = exec_.outputs[k];
      ExecNode hg{.kind = ExecNodeKind::kHeadGrad, .name = absl::StrCat(NameOf(out), "_head_grad"),
                  .ctx = exec_.entries[out].ctx, .source = static_cast<uint32_t>(k)};
      const uint32_t e = exec_.nodes[AddNode(std::move(hg), {OutOf(out)}, true)].first_output;
      exec_.head_grad_entries[k] = e;
      contributions_[heads[k]].push_back(e);
    }
    for (uint32_t id = static_cast<uint32_t>(graph_.num_nodes()); id-- > 0;) {
      const Node& node = graph_.node(id);
      if (node.is_variable() || StopsGradient(node)) continue;
      RETURN_IF_ERROR(BackwardOf(id, need));
    }
    for (size_t a = 0; a < graph_.argument_nodes().size(); ++a) {
      const OpReqType req = a < options_.grad_req.size() ? options_.grad_req[a] : OpReqType::kNullOp;
      if (req == OpReqType::kNullOp) continue;
      const uint32_t var = exec_.argument_entries[a];
      const Context ctx = exec_.entries[var].ctx;
      const std::string name = absl::StrCat(exec_.nodes[exec_.entries[var].node].name, "_grad");
      const std::vector<uint32_t>& contribs = contributions_[graph_.entry_id(graph_.argument_nodes()[a], 0)];
      uint32_t grad;
      if (contribs.empty()) {
        if (req == OpReqType::kAddTo) continue;  // adding nothing leaves the array as it is
        grad = Zeros(OutOf(var), ctx, name, true);
      } else {
        // A gradient written straight by the one Backward producing it, when that is on the
        // right device; otherwise a sum node writes the bound array.
        const bool direct = contribs.size() == 1 && exec_.entries[contribs[0]].ctx == ctx &&
                            exec_.nodes[exec_.entries[contribs[0]].node].kind == ExecNodeKind::kBackward;
        ASSIGN_OR_RETURN(grad, Aggregate(contribs, ctx, name, !direct));
        exec_.external[grad] = true;
      }
      exec_.entries[grad].req = req == OpReqType::kAddTo ? OpReqType::kAddTo : OpReqType::kWriteTo;
      exec_.gradient_entries[a] = grad;
    }
    return absl::OkStatus();
  }

  absl::Status BackwardOf(uint32_t id, const std::vector<bool>& need) {
    const Node& node = graph_.node(id);
    const std::vector<uint32_t>& inputs = graph_.inputs(id);
    const int num_args = node.num_arguments();
    bool any_input = false;
    for (int i = 0; i < num_args; ++i) any_input = any_input || need[inputs[i]];
    const int visible = node.num_visible_outputs();
    bool any_output = false;
    for (int i = 0; i < visible; ++i) any_output = any_output || !contributions_[graph_.entry_id(id, i)].empty();
    if (!any_input || !any_output) return absl::OkStatus();

    const uint32_t fwd = forward_exec_id_.at(id);
    // A copy: adding nodes below reallocates exec_.nodes.
    const ExecNode fnode = exec_.nodes[fwd];
    const Context ctx = fnode.ctx;
    std::vector<uint32_t> out_grad(visible);
    for (int i = 0; i < visible; ++i) {
      ASSIGN_OR_RETURN(out_grad[i], Aggregate(contributions_[graph_.entry_id(id, i)], ctx,
                                              absl::StrCat(node.name, "_out", i, "_grad_sum"), false));
    }
    std::vector<int> og_ids, in_ids, out_ids;
    for (int i = 0; i < visible; ++i) og_ids.push_back(i);
    for (int i = 0; i < num_args; ++i) in_ids.push_back(visible + i);
    for (int i = 0; i < node.num_outputs(); ++i) out_ids.push_back(visible + num_args + i);
    ExecNode bwd{.kind = ExecNodeKind::kBackward, .name = absl::StrCat(node.name, "_backward"),
                 .ctx = ctx, .op = node.op, .source = id};
    bwd.forward_exec_id = fwd;
    bwd.out_grad.assign(visible, kNoEntry);
    bwd.in_data.assign(num_args, kNoEntry);
    bwd.out_data.assign(node.num_outputs(), kNoEntry);
    for (int dep : node.op->DeclareBackwardDependency(og_ids, in_ids, out_ids)) {
      uint32_t entry;
      if (dep < visible) {
        if (out_grad[dep] == kNoEntry) {
          out_grad[dep] = Zeros(OutOf(fnode.first_output + dep), ctx,
                                absl::StrCat(node.name, "_out", dep, "_zero_grad"), false);
        }
        entry = bwd.out_grad[dep] = out_grad[dep];
      } else if (dep < visible + num_args) {
        entry = bwd.in_data[dep - visible] = fnode.inputs[dep - visible];
      } else {
        entry = bwd.out_data[dep - visible - num_args] = fnode.first_output + (dep - visible - num_args);
      }
      if (std::find(bwd.inputs.begin(), bwd.inputs.end(), entry) == bwd.inputs.end()) bwd.inputs.push_back(entry);
    }
    std::vector<Out> outs;
    for (int i = 0; i < num_args; ++i) outs.push_back(OutOf(fnode.inputs[i]));
    const uint32_t bid = AddNode(std::move(bwd), outs);
    for (int i = 0; i < num_args; ++i) {
      const uint32_t g = exec_.Entry(bid, i);
      if (need[inputs[i]]) {
        contributions_[inputs[i]].push_back(g);
      } else {
        exec_.entries[g].req = OpReqType::kNullOp;
      }
    }
    return absl::OkStatus();
  }

  const IndexedGraph& graph_;
  const std::vector<Shape>& shapes_;
  const std::vector<DType>& types_;
  const ExecGraphOptions& options_;
  ExecGraph exec_;
  std::vector<uint32_t> to_exec_;  // forward entry -> exec entry
  absl::flat_hash_map<uint32_t, uint32_t> forward_exec_id_;
  std::map<std::pair<uint32_t, std::string>, uint32_t> copies_;
  // Per forward entry: the exec entries holding gradient contributions to it.
  std::vector<std::vector<uint32_t>> contributions_;
};

}  // namespace

absl::StatusOr<ExecGraph> BuildExecGraph(const IndexedGraph& graph, const std::vector<Shape>& shapes,
                                         const std::vector<DType>& types,
                                         const ExecGraphOptions& options) {
  return ExecGraphBuilder(graph, shapes, types, options).Build();
}

}  // namespace tessera::graph
