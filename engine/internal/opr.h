// Opr and OprBlock: a function with its variables, and one pending execution of it.
//
// An Opr made by NewOperator lives in a SlabPool and is reference-counted: the handle
// holds one reference and every push in flight one more, so DeleteOperator frees it only
// after its last execution. A one-shot PushAsync/PushSync builds its Opr inside the
// OprBlock itself (one allocation per push).
//
// An OprBlock is owned by the engine from push to completion. `wait` counts the
// dependencies still unmet plus one for the push itself; whoever brings it to zero
// dispatches the block.
#ifndef TESSERA_ENGINE_INTERNAL_OPR_H_
#define TESSERA_ENGINE_INTERNAL_OPR_H_

#include <atomic>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/internal/var.h"

namespace tessera::engine {

namespace internal {
using VarList = absl::InlinedVector<Var*, 4>;
}  // namespace internal

class Opr {
 public:
  // The fields every push sets first: a one-shot Opr sits right behind its OprBlock's
  // header, and these then share the block's first cache lines (see OprBlock).
  FnProperty prop = FnProperty::kNormal;
  // Engine-internal functions (waits, deletions) run even when a variable carries an error.
  bool runs_despite_errors = false;
  const char* name = nullptr;
  Engine::SyncFn sync_fn;    // exactly one of the two is set
  Engine::AsyncFn async_fn;
  internal::VarList const_vars;  // disjoint from mutate_vars, no duplicates
  internal::VarList mutate_vars;

  // Pre-built operators only.
  std::atomic<uint32_t> generation{1};
  std::atomic<int> refs{0};
  std::atomic<bool> deleted{false};
  Opr* next_free = nullptr;
  const void* owner = nullptr;

  const char* display_name() const { return name != nullptr ? name : "(unnamed function)"; }

  // Back to empty. Writes only what is set (see OprBlock for why).
  void Reset() {
    if (sync_fn) sync_fn = nullptr;
    if (async_fn) async_fn = nullptr;
    if (!const_vars.empty()) const_vars.clear();
    if (!mutate_vars.empty()) mutate_vars.clear();
    if (name != nullptr) name = nullptr;
    if (runs_despite_errors) runs_despite_errors = false;
    if (deleted.load(std::memory_order_relaxed)) deleted.store(false, std::memory_order_relaxed);
  }
};

namespace internal {

// Field order matters: a block is filled on a pushing thread, run and recycled on a
// worker, and reused on a pushing thread again, so every cache line both sides write
// travels between the cores twice per function. The header and the one-shot function's
// hot fields come first, so a push with no variables touches the first two lines only;
// what most pushes leave alone comes last.
struct OprBlock {
  std::atomic<int> wait{0};
  int priority = 0;
  bool profiling = false;
  bool prebuilt = false;
  Context ctx;
  Opr* opr = nullptr;  // == &one_shot, or a pooled pre-built operator we hold a ref on
  Opr one_shot;
  // Set when a variable was deleted by another thread between validation and append.
  std::shared_ptr<ErrorRecord> rejected;
  // GPU stream the function ran on (threaded engine, GPU contexts).
  void* stream = nullptr;
  int64_t start_ns = 0;
  // One node per variable: const vars first, then mutate vars.
  absl::InlinedVector<VarNode, 4> nodes;

  // Back to a fresh block, writing only the fields that were set (see above).
  void Reset() {
    opr = nullptr;
    if (prebuilt) prebuilt = false;
    if (profiling) profiling = false;
    if (priority != 0) priority = 0;
    if (rejected != nullptr) rejected.reset();
    if (stream != nullptr) stream = nullptr;
    if (start_ns != 0) start_ns = 0;
    if (!nodes.empty()) nodes.clear();
    one_shot.Reset();
  }
};

// True when `h` names a live variable of the engine `owner`.
inline bool IsLive(VarHandle h, const void* owner) {
  return h.var != nullptr && h.var->owner == owner &&
         h.var->generation.load(std::memory_order_acquire) == h.generation &&
         !h.var->deleted.load(std::memory_order_acquire);
}

// Validates the handles and fills `out_const`/`out_mutate` with distinct variables: a
// variable named twice is folded, one both read and mutated counts as mutated.
inline absl::Status ResolveVars(const void* owner, const char* fn_name,
                                absl::Span<const VarHandle> const_vars,
                                absl::Span<const VarHandle> mutate_vars, VarList* out_const,
                                VarList* out_mutate) {
  auto check = [&](absl::Span<const VarHandle> list, const char* which) -> absl::Status {
    for (size_t i = 0; i < list.size(); ++i) {
      if (!IsLive(list[i], owner)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "function '", fn_name != nullptr ? fn_name : "(unnamed function)", "': ", which,
            "[", i, "] is ",
            list[i].var == nullptr            ? "a null (unknown) variable"
            : list[i].var->owner != owner     ? "a variable of another engine"
                                              : "a deleted variable"));
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check(const_vars, "const_vars"); !s.ok()) return s;
  if (absl::Status s = check(mutate_vars, "mutate_vars"); !s.ok()) return s;
  auto contains = [](const VarList& list, Var* v) {
    for (Var* x : list) {
      if (x == v) return true;
    }
    return false;
  };
  // Cleared only when not empty: these may sit in a recycled block (see OprBlock).
  if (!out_const->empty()) out_const->clear();
  if (!out_mutate->empty()) out_mutate->clear();
  for (VarHandle h : mutate_vars) {
    if (!contains(*out_mutate, h.var)) out_mutate->push_back(h.var);
  }
  for (VarHandle h : const_vars) {
    if (!contains(*out_mutate, h.var) && !contains(*out_const, h.var)) out_const->push_back(h.var);
  }
  return absl::OkStatus();
}

// The status stored for a failed function: names the function.
inline absl::Status FunctionFailed(const char* fn_name, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("function '",
                                                  fn_name != nullptr ? fn_name
                                                                     : "(unnamed function)",
                                                  "' failed: ", status.message()));
}

}  // namespace internal
}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_INTERNAL_OPR_H_
