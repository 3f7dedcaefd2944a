#include "graph/memory_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tessera::graph {
namespace {

int64_t Bytes(const ExecEntry& e) { return e.shape.Size() * DTypeSize(e.dtype); }

// The entries a node reads, once per use.
std::vector<uint32_t> Reads(const ExecNode& node) {
  std::vector<uint32_t> reads = node.inputs;
  reads.insert(reads.end(), node.aux.begin(), node.aux.end());
  return reads;
}

// (input entry, output index) pairs the node's operator allows to share memory.
std::vector<std::pair<uint32_t, uint32_t>> InplacePairs(const ExecNode& node) {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  if (node.kind == ExecNodeKind::kForward || node.kind == ExecNodeKind::kGradSum) {
    const int n_in = static_cast<int>(node.inputs.size());
    std::vector<int> in_ids, out_ids;
    for (int i = 0; i < n_in; ++i) in_ids.push_back(i);
    for (uint32_t i = 0; i < node.num_outputs; ++i) out_ids.push_back(n_in + static_cast<int>(i));
    for (auto [in, out] : node.op->ForwardInplaceOption(in_ids, out_ids)) {
      if (in >= 0 && in < n_in && out >= n_in) pairs.emplace_back(node.inputs[in], out - n_in);
    }
  } else if (node.kind == ExecNodeKind::kBackward) {
    // Ids: out_grad, in_data, out_data, in_grad, in that order, as in MXNet.
    std::vector<uint32_t> by_id;
    std::vector<int> og, id, od, ig;
    for (uint32_t e : node.out_grad) og.push_back(static_cast<int>(by_id.size())), by_id.push_back(e);
    for (uint32_t e : node.in_data) id.push_back(static_cast<int>(by_id.size())), by_id.push_back(e);
    for (uint32_t e : node.out_data) od.push_back(static_cast<int>(by_id.size())), by_id.push_back(e);
    const int first_grad = static_cast<int>(by_id.size());
    for (uint32_t i = 0; i < node.num_outputs; ++i) ig.push_back(first_grad + static_cast<int>(i));
    for (auto [in, out] : node.op->BackwardInplaceOption(og, id, od, ig)) {
      if (in >= 0 && in < first_grad && by_id[in] != kNoEntry && out >= first_grad) {
        pairs.emplace_back(by_id[in], out - first_grad);
      }
    }
  }
  return pairs;
}

class Planner {
 public:
  Planner(const ExecGraph& graph, const MemoryPlanOptions& options) : graph_(graph), options_(options) {}

  MemoryPlan Run() {
    const size_t n = graph_.entries.size();
    plan_.storage.assign(n, kExternalStorage);
    plan_.inplace.assign(n, false);
    plan_.released_after.resize(graph_.nodes.size());
    refs_.assign(n, 0);
    for (const ExecNode& node : graph_.nodes) {
      for (uint32_t e : Reads(node)) ++refs_[e];
    }
    for (uint32_t e : graph_.outputs) ++refs_[e];  // outputs stay readable after Forward
    for (uint32_t e = 0; e < n; ++e) {
      if (!graph_.external[e]) plan_.no_reuse_bytes += Bytes(graph_.entries[e]);
    }
    for (uint32_t id = 0; id < graph_.nodes.size(); ++id) Visit(id);
    for (const MemoryPlan::Slot& s : plan_.slots) plan_.planned_bytes += s.bytes;
    return std::move(plan_);
  }

 private:
  void Visit(uint32_t id) {
    const ExecNode& node = graph_.nodes[id];
    absl::flat_hash_set<uint32_t> taken_inplace;
    const auto pairs = options_.inplace ? InplacePairs(node) : decltype(InplacePairs(node)){};
    for (uint32_t o = 0; o < node.num_outputs; ++o) {
      const uint32_t e = node.first_output + o;
      if (graph_.external[e]) continue;
      for (auto [in, out] : pairs) {
        if (out != o || graph_.external[in] || plan_.storage[in] < 0 || refs_[in] != 1 ||
            taken_inplace.contains(in) || Bytes(graph_.entries[in]) != Bytes(graph_.entries[e]) ||
            graph_.entries[in].ctx != graph_.entries[e].ctx) {
          continue;
        }
        plan_.storage[e] = plan_.storage[in];
        plan_.inplace[e] = true;
        taken_inplace.insert(in);
        break;
      }
      if (!plan_.inplace[e]) plan_.storage[e] = Allocate(graph_.entries[e]);
    }
    for (uint32_t in : Reads(node)) {
      if (--refs_[in] == 0 && plan_.storage[in] >= 0 && !taken_inplace.contains(in)) Release(id, in);
    }
    for (uint32_t o = 0; o < node.num_outputs; ++o) {
      const uint32_t e = node.first_output + o;
      if (refs_[e] == 0 && plan_.storage[e] >= 0) Release(id, e);
    }
  }

  int Allocate(const ExecEntry& entry) {
    const int64_t bytes = Bytes(entry);
    if (options_.reuse) {
      // Best fit among free slots of the device; else grow the largest free one.
      auto& pool = free_[entry.ctx.ToString()];
      auto it = pool.lower_bound(bytes);
      if (it == pool.end() && !pool.empty()) it = std::prev(pool.end());
      if (it != pool.end()) {
        const int slot = it->second;
        pool.erase(it);
        plan_.slots[slot].bytes = std::max(plan_.slots[slot].bytes, bytes);
        return slot;
      }
    }
    plan_.slots.push_back({entry.ctx, bytes});
    return static_cast<int>(plan_.slots.size()) - 1;
  }

  void Release(uint32_t node, uint32_t entry) {
    plan_.released_after[node].push_back(entry);
    const int slot = plan_.storage[entry];
    if (options_.reuse) free_[plan_.slots[slot].ctx.ToString()].emplace(plan_.slots[slot].bytes, slot);
  }

  const ExecGraph& graph_;
  const MemoryPlanOptions& options_;
  MemoryPlan plan_;
  std::vector<int> refs_;
  std::map<std::string, std::multimap<int64_t, int>> free_;  // per device: size -> slot
};

}  // namespace

MemoryPlan PlanMemory(const ExecGraph& graph, const MemoryPlanOptions& options) {
  return Planner(graph, options).Run();
}

std::string ValidatePlan(const ExecGraph& graph, const MemoryPlan& plan) {
  constexpr uint32_t kForever = std::numeric_limits<uint32_t>::max();
  const size_t n = graph.entries.size();
  std::vector<uint32_t> last(n);
  for (uint32_t e = 0; e < n; ++e) last[e] = graph.entries[e].node;
  for (uint32_t id = 0; id < graph.nodes.size(); ++id) {
    for (uint32_t e : Reads(graph.nodes[id])) last[e] = std::max(last[e], id);
  }
  for (uint32_t e : graph.outputs) last[e] = kForever;
  std::map<int, std::vector<uint32_t>> by_slot;
  for (uint32_t e = 0; e < n; ++e) {
    if (plan.storage[e] >= 0) by_slot[plan.storage[e]].push_back(e);
  }
  // Entries come in definition order, so `b` is defined no earlier than `a`.
  for (const auto& [slot, entries] : by_slot) {
    for (size_t i = 0; i < entries.size(); ++i) {
      for (size_t j = i + 1; j < entries.size(); ++j) {
        const uint32_t a = entries[i], b = entries[j];
        const uint32_t def_b = graph.entries[b].node;
        const bool after = def_b > last[a] && last[a] != kForever;
        const bool replaces = def_b == last[a] && plan.inplace[b];
        if (!after && !replaces) {
          return absl::StrCat("slot ", slot, " holds entry ", a, " (of '", graph.nodes[graph.entries[a].node].name,
                              "') and entry ", b, " (of '", graph.nodes[def_b].name,
                              "') while both are live");
        }
      }
    }
  }
  return "";
}

}  // namespace tessera::graph
