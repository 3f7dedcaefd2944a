#include "kvstore/internal/fused_update_host.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kvstore/internal/loss_scaler.h"
#include "kvstore/internal/update_kernel.h"

namespace tessera::kvstore::internal {
namespace {

// The lowest tensor with a NaN or an infinity in its gradient, until a step is recorded
// (the GPU's FusedCheckKernel).
void Check(const FusedTable& table) {
  FusedCounters* c = table.counters;
  if (c->nonfinite_step != 0) return;
  for (int32_t i = 0; i < table.num_chunks; ++i) {
    const FusedChunk& chunk = table.chunks[i];
    const FusedTensor& t = table.tensors[chunk.tensor];
    const float* begin = t.grad + chunk.begin;
    const float* end = t.grad + std::min(chunk.begin + kFusedChunkElements, t.n);
    if (!std::all_of(begin, end, [](float g) { return std::isfinite(g); })) {
      c->nonfinite_tensor = std::min(c->nonfinite_tensor, chunk.tensor);
    }
  }
}

// Dynamic loss scaling: every gradient divided by the scale in place (a power of two: exact),
// and whether one held a NaN or an infinity (the GPU's FusedUnscaleKernel).
void Unscale(const FusedTable& table) {
  const float inverse = 1.0f / *table.loss_scale;
  bool overflow = false;
  for (int32_t i = 0; i < table.num_chunks; ++i) {
    const FusedChunk& chunk = table.chunks[i];
    const FusedTensor& t = table.tensors[chunk.tensor];
    float* g = t.grad + chunk.begin;
    const int64_t n = std::min(kFusedChunkElements, t.n - chunk.begin);
    for (int64_t k = 0; k < n; ++k) {
      g[k] *= inverse;
      overflow |= !std::isfinite(g[k]);
    }
  }
  if (overflow) table.scaler->overflow = 1;
}

template <typename Kernel>
void Update(const FusedTable& table) {
  if (table.scaler != nullptr && table.scaler->overflow != 0) return;  // skipped
  const FusedCounters* c = table.counters;
  const int64_t row = c->steps_done + 1 - table.window->first_step;
  if (row < 0 || row >= table.window->rows) return;
  const auto* hypers = static_cast<const decltype(Kernel::h)*>(table.hypers) + row * table.window->groups;
  // Chunk by chunk as the GPU's blocks; elementwise, so the same values as whole tensors.
  for (int32_t i = 0; i < table.num_chunks; ++i) {
    const FusedChunk& chunk = table.chunks[i];
    const FusedTensor& t = table.tensors[chunk.tensor];
    const int64_t n = std::min(kFusedChunkElements, t.n - chunk.begin);
    float* states[kMaxFusedStates];
    for (int s = 0; s < kMaxFusedStates; ++s) {
      states[s] = t.state[s] != nullptr ? t.state[s] + chunk.begin : nullptr;
    }
    Kernel{hypers[t.group]}.Cpu(n, t.grad + chunk.begin, t.weight + chunk.begin, states);
  }
}

// The GPU's FusedCountKernel.
void Count(const FusedTable& table) {
  FusedCounters* c = table.counters;
  if (c->nonfinite_step == 0 && c->nonfinite_tensor != kNoTensor) c->nonfinite_step = c->steps_done + 1;
  // A step skipped for an overflow is no update: the next takes its row.
  const bool skipped = table.scaler != nullptr && table.scaler->overflow != 0;
  const int64_t row = c->steps_done + 1 - table.window->first_step;
  if (row < 0 || row >= table.window->rows) {
    ++c->missed;
  } else if (!skipped) {
    ++c->steps_done;
  }
  if (table.scaler != nullptr) AdvanceLossScale(table.scaler, table.loss_scale);
}

}  // namespace

void FusedUpdateHost(FusedKind kind, const FusedTable& table, bool check_finite) {
  if (table.loss_scale != nullptr) Unscale(table);
  if (check_finite) Check(table);
  switch (kind) {
    case FusedKind::kSgd: Update<SgdKernel>(table); break;
    case FusedKind::kSgdMom: Update<SgdMomKernel>(table); break;
    case FusedKind::kAdam: Update<AdamKernel>(table); break;
    case FusedKind::kRmsProp: Update<RmsPropKernel>(table); break;
    case FusedKind::kRmsPropCentered: Update<RmsPropCenteredKernel>(table); break;
    case FusedKind::kAdaGrad: Update<AdaGradKernel>(table); break;
  }
  Count(table);
}

}  // namespace tessera::kvstore::internal
