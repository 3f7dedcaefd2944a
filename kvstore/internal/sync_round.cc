#include "kvstore/internal/sync_round.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kvstore/internal/update_kernels.h"

namespace tessera::kvstore {

void CopyPieces(const std::vector<std::string_view>& pieces, char* out) {
  for (std::string_view p : pieces) {
    std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
}

void AddPieces(const std::vector<std::string_view>& pieces, float* out) {
  if (std::any_of(pieces.begin(), pieces.end(),
                  [](std::string_view p) { return p.size() % sizeof(float); })) {
    std::string joined;
    for (std::string_view p : pieces) joined += p;
    return AddPieces({joined}, out);
  }
  for (std::string_view p : pieces) {
    const float* in = reinterpret_cast<const float*>(p.data());
    const size_t n = p.size() / sizeof(float);
    internal::AddTo(static_cast<int64_t>(n), in, out);
    out += n;
  }
}

std::vector<std::string_view> SyncRound::Payload::views() const {
  if (in_place.has_value()) return {*in_place};
  return std::vector<std::string_view>(pieces.begin(), pieces.end());
}

SyncRound::SyncRound(int num_workers)
    : pushed_(num_workers, 0), rounds_of_(num_workers, 0), held_(num_workers) {}

void SyncRound::Accept(int rank, Payload payload, float* sum) {
  pushed_[rank] = 1;
  ++pushed_count_;
  rounds_of_[rank] = rounds_done_ + 1;
  if (rank != next_rank_) {
    held_[rank] = payload.in_place.has_value()
                      ? std::vector<std::string>{std::string(*payload.in_place)}
                      : std::move(payload.pieces);
    return;
  }
  Add(payload.views(), sum);
  // The held pushes it was waiting for.
  for (++next_rank_; next_rank_ < num_workers() && pushed_[next_rank_]; ++next_rank_) {
    AddHeld(next_rank_, sum);
  }
}

bool SyncRound::Ready(const std::vector<char>& joined, float* sum) {
  if (pushed_count_ == 0) return false;
  for (int r = 0; r < num_workers(); ++r) {
    if (!pushed_[r] && !joined[r]) return false;
  }
  // The held pushes above a rank that did not push (it joined), in order.
  for (int r = next_rank_; r < num_workers(); ++r) {
    if (pushed_[r]) AddHeld(r, sum);
  }
  next_rank_ = num_workers();
  return true;
}

void SyncRound::Finish() {
  Clear();
  ++rounds_done_;
}

void SyncRound::Abandon() {
  Clear();
  std::fill(rounds_of_.begin(), rounds_of_.end(), rounds_done_);
}

void SyncRound::Restore(int64_t rounds_done) {
  Clear();
  rounds_done_ = rounds_done;
  std::fill(rounds_of_.begin(), rounds_of_.end(), rounds_done);
}

void SyncRound::AlignRanks() { std::fill(rounds_of_.begin(), rounds_of_.end(), rounds_done_); }

void SyncRound::Add(const std::vector<std::string_view>& payload, float* sum) {
  if (sum_empty_) {
    CopyPieces(payload, reinterpret_cast<char*>(sum));
  } else {
    AddPieces(payload, sum);
  }
  sum_empty_ = false;
}

void SyncRound::AddHeld(int rank, float* sum) {
  Add(std::vector<std::string_view>(held_[rank].begin(), held_[rank].end()), sum);
  held_[rank].clear();
}

void SyncRound::Clear() {
  std::fill(pushed_.begin(), pushed_.end(), 0);
  pushed_count_ = 0;
  next_rank_ = 0;
  sum_empty_ = true;
  for (auto& held : held_) held.clear();
}

}  // namespace tessera::kvstore
