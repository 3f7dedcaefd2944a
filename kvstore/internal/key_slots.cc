#include "kvstore/internal/key_slots.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore {

std::optional<KeySlots> SlotBudget::Share(int key_id, uint64_t key_bytes, int num_workers) {
  if (!limits_.enabled || key_bytes < limits_.min_key_bytes || keys_ >= limits_.max_keys) {
    return std::nullopt;
  }
  constexpr uint64_t kPage = 4096;  // slots start on pages of their own
  const uint64_t stride = (key_bytes + kPage - 1) / kPage * kPage;
  const uint64_t total = stride * static_cast<uint64_t>(num_workers);
  if (total > limits_.max_bytes - std::min(bytes_, limits_.max_bytes)) {
    return std::nullopt;  // over the budget: this key travels on the stream
  }
  absl::StatusOr<SharedMemory> region = SharedMemory::Create(absl::StrCat("key-", key_id), total);
  if (!region.ok()) {
    spdlog::warn("server {}: key {} is not shared with same-host workers: {}", server_index_,
                 key_id, region.status().ToString());
    return std::nullopt;
  }
  bytes_ += total;
  ++keys_;
  return KeySlots(*std::move(region), key_bytes, stride);
}

}  // namespace tessera::kvstore
