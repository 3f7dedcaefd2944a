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
  Engine::SyncFn sync_fn;    // exactly one of the two is set
  Engine::AsyncFn async_fn;
  internal::VarList const_vars;  // disjoint from mutate_vars, no duplicates
  internal::VarList mutate_vars;
  FnProperty prop = FnProperty::kNormal;
  const char* name = nullptr;
  // Engine-internal functions (waits, deletions) run even when a variable carries an error.
  bool runs_despite_errors = false;

  // Pre-built operators only.
  std::atomic<uint32_t> generation{1};
  std::atomic<int> refs{0};
  std::atomic<bool> deleted{false};
  Opr* next_free = nullptr;
  const void* owner = nullptr;

  const char* display_name() const { return name != nullptr ? name : "(unnamed function)"; }

  void Reset() {
    sync_fn = nullptr;
    async_fn = nullptr;
    const_vars.clear();
    mutate_vars.clear();
    name = nullptr;
    runs_despite_errors = false;
    deleted.store(false, std::memory_order_relaxed);
  }
};

namespace internal {

struct OprBlock {
  std::atomic<int> wait{0};
  Opr* opr = nullptr;  // == &one_shot, or a pooled pre-built operator we hold a ref on
  Context ctx;
  int priority = 0;
  bool profiling = false;
  bool prebuilt = false;
  // Set when a variable was deleted by another thread between validation and append.
  std::shared_ptr<ErrorRecord> rejected;
  // GPU stream the function ran on (threaded engine, GPU contexts).
  void* stream = nullptr;
  int64_t start_ns = 0;
  // One node per variable: const vars first, then mutate vars.
  absl::InlinedVector<VarNode, 4> nodes;
  Opr one_shot;
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
  out_const->clear();
  out_mutate->clear();
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
