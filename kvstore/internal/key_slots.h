// KeySlots: one key's region of shared memory on a parameter server, one page-aligned slot per
// worker rank, through which workers on the server's host push and pull instead of the
// stream. SlotBudget: how many regions, and bytes in all, a server may hold (each region
// holds a file descriptor). No locks: the store makes regions under its lock, and a rank's
// slot is written by one side at a time (the protocol in proto/kvstore.proto says which).
#ifndef TESSERA_KVSTORE_INTERNAL_KEY_SLOTS_H_
#define TESSERA_KVSTORE_INTERNAL_KEY_SLOTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/shared_memory.h"

namespace tessera::kvstore {

class KeySlots {
 public:
  KeySlots(SharedMemory region, uint64_t key_bytes, uint64_t stride)
      : region_(std::move(region)), key_bytes_(key_bytes), stride_(stride) {}

  // Where another process maps the region (SharedMemory::Open), and `rank`'s slot in it.
  const std::string& path() const { return region_.path(); }
  uint64_t offset(int rank) const { return stride_ * static_cast<uint64_t>(rank); }
  uint64_t key_bytes() const { return key_bytes_; }
  char* slot(int rank) const { return region_.data() + offset(rank); }
  std::string_view view(int rank) const { return {slot(rank), key_bytes_}; }

 private:
  SharedMemory region_;
  uint64_t key_bytes_;
  uint64_t stride_;
};

class SlotBudget {
 public:
  struct Limits {
    bool enabled = false;
    uint64_t min_key_bytes = 0;   // smaller keys travel on the stream
    uint64_t max_bytes = 0;       // of all regions
    int max_keys = 0;             // regions
  };
  SlotBudget(int server_index, Limits limits) : server_index_(server_index), limits_(limits) {}

  // Slots for key `key_id` of `key_bytes` and `num_workers` ranks, when the limits allow and
  // the region can be made (a failure is logged: the key travels on the stream).
  std::optional<KeySlots> Share(int key_id, uint64_t key_bytes, int num_workers);
  // Every region was let go (a new job).
  void Reset() {
    bytes_ = 0;
    keys_ = 0;
  }

 private:
  const int server_index_;
  const Limits limits_;
  uint64_t bytes_ = 0;  // in the regions made
  int keys_ = 0;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_KEY_SLOTS_H_
