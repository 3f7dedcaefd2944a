// Fuzz target: a backup's side of the Replicate stream (kvstore/internal/replica_store.h):
// chunks made whole by a ReplicaReceiver, then applied to a ReplicaStore (server 1 of 2,
// backing up server 0). The bytes are a sequence of records
//
//   uint16 len   little-endian; a short last record takes what is left
//   len bytes    a serialized ReplicaMessage
//
// Invariants: no crash; an update that is refused changes no copy (the oracle: each key's
// copy before and after); an accepted update leaves its key's copy at its version (or above,
// for a resend), with the bytes its shape needs.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "fuzz/fuzz_runtime.h"
#include "fuzz/require.h"
#include "kvstore/internal/replica_store.h"
#include "proto/kvstore.pb.h"

namespace {

using tessera::kvstore::ReplicaStore;

// Every key's copy (the ones a record can name), for the before/after oracle.
std::map<int, std::optional<ReplicaStore::Copy>> Snapshot(const ReplicaStore& store,
                                                          const std::map<int, bool>& keys) {
  std::map<int, std::optional<ReplicaStore::Copy>> copies;
  for (const auto& [key, unused] : keys) {
    absl::StatusOr<ReplicaStore::Copy> copy = store.Find(key);
    copies[key] = copy.ok() ? std::optional<ReplicaStore::Copy>(*std::move(copy)) : std::nullopt;
  }
  return copies;
}

bool Same(const std::optional<ReplicaStore::Copy>& a, const std::optional<ReplicaStore::Copy>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a.has_value() || (a->shape == b->shape && a->value == b->value &&
                            a->version == b->version && a->taken == b->taken &&
                            a->optimizer_slot == b->optimizer_slot);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  kvstore::ReplicaReceiver receiver(/*server_index=*/1, /*max_array_bytes=*/64 << 10);
  ReplicaStore store(fuzz::FuzzRuntime(), /*server_index=*/1, /*num_servers=*/2);
  std::map<int, bool> keys;  // every key a record named
  size_t pos = 0;
  while (pos + 2 <= size) {
    const size_t len = std::min<size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
    const uint8_t* payload = data + pos + 2;
    pos += 2 + len;
    ReplicaMessage message;
    if (!message.ParseFromArray(payload, static_cast<int>(len))) continue;
    keys[message.value().key()] = true;
    absl::StatusOr<std::optional<kvstore::ReplicaReceiver::Whole>> whole =
        receiver.Add(std::move(message));
    if (!whole.ok() || !whole->has_value()) continue;
    const ReplicaMessage& update = (*whole)->update;
    const int key = update.value().key();
    const bool optimizer = update.has_optimizer();
    const std::string job_before = store.job_id();
    const auto before = Snapshot(store, keys);
    const absl::Status applied = store.Apply(update, (*whole)->pieces);
    const auto after = Snapshot(store, keys);
    if (!applied.ok()) {
      for (const auto& [k, copy] : before) {
        fuzz::Require(Same(copy, after.at(k)), "a refused update changes no copy");
      }
      fuzz::Require(store.job_id() == job_before, "a refused update changes no job");
      continue;
    }
    if (optimizer) continue;
    if (update.has_stash_batch()) {  // a worker's state: no key's copy changes, but a new job's start
      if (store.job_id() == job_before) {
        for (const auto& [k, copy] : before) {
          fuzz::Require(Same(copy, after.at(k)), "a worker's stash changes no copy of a key");
        }
      }
      continue;
    }
    const std::optional<ReplicaStore::Copy>& copy = after.at(key);
    fuzz::Require(copy.has_value(), "an accepted update leaves a copy of its key");
    fuzz::Require(copy->version >= update.version(), "the copy is at the update's version");
    uint64_t bytes = sizeof(float);
    for (int64_t d : copy->shape) bytes *= static_cast<uint64_t>(d);
    fuzz::Require(copy->value.size() == bytes, "the copy holds the bytes of its shape");
  }
  return 0;
}
