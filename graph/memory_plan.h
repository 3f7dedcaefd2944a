// The memory planner: assigns every planned entry of an ExecGraph a storage slot, reusing
// slots across the whole forward+backward graph by liveness, and writing outputs in place
// of inputs where the operator's in-place options allow and the input dies there.
//
// The plan is for the nodes' list order, which is topological; the executor keeps it
// correct for any order the engine picks by giving each slot one engine variable, so a
// write into a reused slot waits for the reads of its previous value.
#ifndef TESSERA_GRAPH_MEMORY_PLAN_H_
#define TESSERA_GRAPH_MEMORY_PLAN_H_

#include <cstdint>
#include <vector>

#include "graph/exec_graph.h"

namespace tessera::graph {

inline constexpr int kExternalStorage = -1;

struct MemoryPlan {
  struct Slot {
    Context ctx;
    int64_t bytes = 0;
  };
  // Per entry: its slot, or kExternalStorage for caller-bound entries.
  std::vector<int> storage;
  // Per entry: written in place over one of its producer's inputs (kWriteInplace).
  std::vector<bool> inplace;
  std::vector<Slot> slots;
  // Per node: the entries whose value is dead once it has run and whose slot it does not
  // write in place (what the debug mode poisons).
  std::vector<std::vector<uint32_t>> released_after;
  int64_t planned_bytes = 0;   // the sum of slot sizes
  int64_t no_reuse_bytes = 0;  // one buffer per planned entry

  double ratio() const {
    return no_reuse_bytes == 0 ? 1.0 : static_cast<double>(planned_bytes) / no_reuse_bytes;
  }
};

struct MemoryPlanOptions {
  bool reuse = true;    // false: one slot per entry (the no-reuse baseline)
  bool inplace = true;  // honour operators' in-place options
};

MemoryPlan PlanMemory(const ExecGraph& graph, const MemoryPlanOptions& options = {});

// Checks that no two entries whose lifetimes overlap share a slot, except an in-place
// output with the input it replaces. Returns a description of the first violation, or "".
std::string ValidatePlan(const ExecGraph& graph, const MemoryPlan& plan);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_MEMORY_PLAN_H_
