// KVStore: MXNet's key-value store for parameter synchronization, the interface the local
// stores implement now and the distributed store (dist_sync, dist_async) will share.
//
// A key (an int) holds one array. Push(key, one array per device) sums the arrays (the
// gradients of the devices), then applies the updater to the stored weight with that sum,
// or, with no updater, stores the sum. Pull(key, one array per device) copies the stored
// value into each. Every step is an engine push (Push and Pull return at once) at the
// caller's priority, so a trainer pushing the last layer's gradients at a higher priority
// gets them reduced and updated first.
//
// Local types (seeds: "Multiple devices on a single machine"):
//   "local_update_cpu"       sum on the CPU, update the CPU copy once, Pull copies it out
//   "local_allreduce_cpu"    sum on the CPU, copy the sum to every device and update each
//                            device's own copy of the weight (optimizer state per device)
//   "local_allreduce_device" as allreduce_cpu, but the sum is made on the devices: with one
//                            array per GPU by NCCL (every GPU gets the sum), otherwise on
//                            the device of the push's first array
//   "local"                  local_update_cpu, as MXNet's "local" (its host buffers are in
//                            pinned memory when the arrays live on GPUs)
//   "device", "nccl"         local_allreduce_device, under MXNet's names for it
// "dist_sync" and "dist_async" are the parameter servers' stores (dist_kvstore.h); Create
// connects to the servers named by the environment's cluster spec (cluster_spec.h).
//
// Devices. Any host contexts work as devices (cpu(0), cpu(1), ... are distinct devices with
// host memory), so every type runs without a GPU. GPU arrays: local_update_cpu copies them
// to pinned host memory, sums and updates there, and copies back. The allreduce types run
// their update on each device's copy (the Optimizer's GPU kernels). Without a GPU,
// allreduce_device reduces on whichever host context the first array is on.
//
// Allreduce copies: a key's device copies are made on its first Push, one per distinct
// device of that push, from the value given to Init; later pushes may come from any of
// those devices, but not from others (INVALID_ARGUMENT). A Pull reads the copy on the
// output's device, or the first copy for another device (before the first Push: the
// initial value).
//
// Errors: an unknown key, a key initialized twice, a none array, an array whose shape or
// dtype differs from the key's (the message names the key and both), mismatched list
// lengths, or an updater that cannot take the key's arrays are INVALID_ARGUMENT (or the
// optimizer's UNIMPLEMENTED for a GPU weight), returned before anything is pushed: a failed
// call leaves the store unchanged. An updater that itself fails mid-call is the exception:
// keys (and device copies) updated before it keep their update. Keys repeated in one call
// are grouped, as MXNet does: their arrays are summed together (Push) or all filled (Pull).
//
// Thread safety: every method may be called from any thread. Calls are serialized by one
// lock, held while the updater runs (on the calling thread): an updater must not call the
// store. The engine orders the pushed work of concurrent calls per array.
#ifndef TESSERA_KVSTORE_KVSTORE_H_
#define TESSERA_KVSTORE_KVSTORE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// What a store type's name says: the one table of the names above, which Create, the job
// checks (client and worker) and Module all read.
struct KVStoreKind {
  bool dist = false;  // dist_sync / dist_async: the parameter servers'
  bool sync = true;   // false for dist_async
  bool local_update = false;  // local / local_update_cpu: one device updates in place
  // device / nccl (and the dist types): used even with one device, which they check (nccl
  // wants GPUs); the local_* types then leave the one device to update in place.
  bool used_on_one_device = false;
};
// INVALID_ARGUMENT naming the type and the known ones for an unknown name.
absl::StatusOr<KVStoreKind> ParseKVStoreType(absl::string_view type);
// "local, local_update_cpu, ...": the known names, for messages.
std::string KnownKVStoreTypes();

class KVStore {
 public:
  // Applies `merged_grad` (the sum of the pushed arrays) to `stored_weight` in place, by
  // engine pushes (NDArray operations). Called synchronously inside Push. Its pushes carry
  // whatever priority its operations use (NDArray's: 0); an Optimizer's carry Push's.
  using Updater = std::function<absl::Status(int key, const NDArray& merged_grad,
                                             const NDArray& stored_weight)>;

  // A store of `type` (see above); INVALID_ARGUMENT for an unknown type.
  static absl::StatusOr<std::unique_ptr<KVStore>> Create(const std::string& type);
  virtual ~KVStore() = default;

  // `priority` (Push, Pull, PushPull): higher is more urgent, MXNet's; Module passes -index,
  // so the first layer's parameters, which the next forward pass needs first, come first. It
  // orders the engine's functions and, in a dist store, each server stream's requests and the
  // servers' replies to them.
  //
  // Stores a copy of values[i] under keys[i] (the array may be reused at once).
  virtual absl::Status Init(const std::vector<int>& keys, const std::vector<NDArray>& values) = 0;
  // values[i]: one array per device for keys[i]; summed, then updated into the stored value.
  virtual absl::Status Push(const std::vector<int>& keys,
                            const std::vector<std::vector<NDArray>>& values, int priority = 0) = 0;
  // Copies keys[i]'s value into every array of outs[i].
  virtual absl::Status Pull(const std::vector<int>& keys,
                            const std::vector<std::vector<NDArray>>& outs, int priority = 0) = 0;
  // Push then Pull, both checked before either is pushed.
  virtual absl::Status PushPull(const std::vector<int>& keys,
                                const std::vector<std::vector<NDArray>>& values,
                                const std::vector<std::vector<NDArray>>& outs,
                                int priority = 0) = 0;

  // Replaces the updater (and any optimizer); an empty function means "store the sum".
  virtual void SetUpdater(Updater updater) = 0;
  // The updater becomes optimizer->Update(key, weight, merged_grad, priority). Null is
  // INVALID_ARGUMENT.
  virtual absl::Status SetOptimizer(std::unique_ptr<Optimizer> optimizer) = 0;
  // The optimizer set by SetOptimizer (owned by the store), or null.
  virtual Optimizer* optimizer() = 0;

  // The optimizer's state wherever it runs (Optimizer::SaveState format locally; the dist
  // stores gather every server's), and its restoration (arrays made with `rt`).
  // FAILED_PRECONDITION without an optimizer.
  virtual absl::StatusOr<std::string> SaveOptimizerStates();
  virtual absl::Status LoadOptimizerStates(const Runtime& rt, const std::string& bytes);

  // The parameter servers' counters of every key part of the job, by server index and key:
  // what they applied (docs/replication.md, "Proof under faults"). UNIMPLEMENTED for a store
  // without servers.
  virtual absl::StatusOr<std::vector<KeyCounters>> RoundCounters();

  // Waits until every worker reaches the barrier; one worker locally, so it returns at once.
  virtual absl::Status Barrier() { return absl::OkStatus(); }

  // A worker that replaces a lost one of its job (dist stores, DistKVStoreOptions::rejoin)
  // continues where its predecessor was lost, as the servers saw it.
  struct RejoinPoint {
    // Barriers the job passed (the fewest at any server).
    int64_t barriers = 0;
    // The predecessor's batches every push of which the servers took: its next push of each
    // key continues the numbering from there.
    int64_t pushes = 0;
  };
  // Whether this store replaces a lost worker.
  virtual bool rejoining() const { return false; }
  // This worker's state that no key holds (a network's auxiliary states, BatchNorm's running
  // statistics; float32), as of the batch whose pushes come next: a replacement of this
  // worker starts from it (RestoreWorkerState). The arrays are read once the engine's writes
  // to them are done, and the pushes issued after this call wait until the servers hold the
  // state, so it is there for every batch the servers took all pushes of. A store whose job
  // does not replace lost workers keeps nothing (OK).
  virtual absl::Status StashWorkerState(const std::vector<NDArray>& arrays) {
    return absl::OkStatus();
  }
  // A replacement, after Rejoin: fills `arrays` (as its predecessor stashed them) with the
  // predecessor's state after the last batch the servers took every push of. NOT_FOUND when
  // the servers hold none (the predecessor stashed nothing by then, or the server keeping it
  // failed over since); FAILED_PRECONDITION for a store that does not replace a worker.
  virtual absl::Status RestoreWorkerState(const std::vector<NDArray>& arrays);
  // After Init of `keys` (every key the trainer pushes in each batch): where the predecessor
  // was. The next Pull of each key answers what the predecessor pulled after its push
  // number `pushes` - the weights its next batch was (or would have been) computed from.
  // The trainer calls Barrier `setup_barriers` times before its first batch and once after
  // each epoch: the barriers of the epochs its predecessor finished are not called again, so
  // only the setup's (and, at a server where the predecessor passed one more barrier than at
  // another, that one) are skipped. FAILED_PRECONDITION for a store that does not replace a
  // worker.
  virtual absl::StatusOr<RejoinPoint> Rejoin(const std::vector<int>& keys, int setup_barriers);
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }
  const std::string& type() const { return type_; }

 protected:
  explicit KVStore(std::string type) : type_(std::move(type)) {}

 private:
  const std::string type_;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_KVSTORE_H_
