// LocalKVStore: the local_update_cpu, local_allreduce_cpu and local_allreduce_device stores
// (kvstore.h has their contract). One class, as the three differ only in where the sum is
// made and which copies the updater runs on.
//
// Every call works in two phases under the store's lock: Prepare* checks everything and
// allocates every buffer (so a bad call or an allocation failure returns before anything
// is pushed or any key changes), then Execute* pushes the copies, sums and updates.
//
// local_allreduce_device with one array per GPU (the usual data-parallel worker) sums with
// NCCL: one communicator per device set, each key's allreduce an engine function that starts
// as soon as that key's gradients are ready, at the push's priority, and leaves the sum on
// every device, where each device's copy of the weight is updated. Other mixes of devices
// (several arrays on one GPU, host arrays) copy to the first array's device and sum there.
#ifndef TESSERA_KVSTORE_INTERNAL_LOCAL_KVSTORE_H_
#define TESSERA_KVSTORE_INTERNAL_LOCAL_KVSTORE_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "core/mutex.h"
#include "kvstore/kvstore.h"

namespace tessera::kvstore::internal {

class NcclCommunicator;  // nccl_communicator.h, CUDA builds only

enum class LocalMode { kUpdateCpu, kAllreduceCpu, kAllreduceDevice };

class LocalKVStore : public KVStore {
 public:
  LocalKVStore(std::string type, LocalMode mode) : KVStore(std::move(type)), mode_(mode) {}

  absl::Status Init(const std::vector<int>& keys, const std::vector<NDArray>& values) override;
  absl::Status Push(const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& values,
                    int priority) override;
  absl::Status Pull(const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& outs,
                    int priority) override;
  absl::Status PushPull(const std::vector<int>& keys,
                        const std::vector<std::vector<NDArray>>& values,
                        const std::vector<std::vector<NDArray>>& outs, int priority) override;
  void SetUpdater(Updater updater) override;
  absl::Status SetOptimizer(std::unique_ptr<Optimizer> optimizer) override;
  Optimizer* optimizer() override;

 private:
  // Scratch arrays of a key, reused across calls: the sum, host copies of GPU arrays being
  // summed on the host, and the sum copied to each device copy's device.
  enum Role { kMerged, kStage, kGrad };
  using BufferKey = std::tuple<int, int, Context>;  // role, slot, device

  struct Entry {
    NDArray stored;                 // update_cpu: the weight; allreduce: the initial value
    std::vector<NDArray> replicas;  // allreduce: the per-device weights, from the first push
    Context host;                   // where host-side sums and copies live
    absl::flat_hash_map<BufferKey, NDArray> buffers;
  };

  // One key's share of a Push, checked, with every array it needs allocated.
  struct PushPlan {
    int key = 0;
    Entry* entry = nullptr;
    std::vector<std::pair<NDArray, NDArray>> stage;  // (GPU array, its host copy)
    std::vector<NDArray> sources;                    // what the sum reads
    NDArray merged;
    std::vector<NDArray> new_replicas;  // allreduce, first push: made from `stored`
    std::vector<NDArray> grads;         // allreduce: the sum on each copy's device
    // local_allreduce_device over NCCL: `sources` in the order of the key's devices (the
    // replicas'), each summed into grads[i] on its own device. Null: the copy-and-sum path.
    std::shared_ptr<NcclCommunicator> nccl;
  };
  struct PullPlan {
    Entry* entry = nullptr;
    std::vector<NDArray> outs;
  };

  bool allreduce() const { return mode_ != LocalMode::kUpdateCpu; }
  absl::StatusOr<std::vector<PushPlan>> PreparePush(const std::vector<int>& keys,
                                                    const std::vector<std::vector<NDArray>>& values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<PullPlan>> PreparePull(const std::vector<int>& keys,
                                                    const std::vector<std::vector<NDArray>>& outs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ExecutePush(std::vector<PushPlan>& plans, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ExecutePull(const std::vector<PullPlan>& plans, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // grad applied to weight by the optimizer, the updater, or a plain copy.
  absl::Status Apply(int key, const NDArray& grad, const NDArray& weight, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckUpdater(int key, const NDArray& like) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::StatusOr<NDArray> Buffer(Entry* entry, Role role, int slot, Context ctx);
  // The communicator over the devices of `arrays`, in their order, created on first use; null
  // when they are not one array per distinct GPU (or the build has no CUDA).
  absl::StatusOr<std::shared_ptr<NcclCommunicator>> NcclFor(const std::vector<NDArray>& arrays)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PushNcclSum(const PushPlan& plan, int priority);

  const LocalMode mode_;
  Mutex mu_;  // not absl::Mutex, for TSan (see optimizer.h)
  std::map<int, Entry> entries_ ABSL_GUARDED_BY(mu_);  // a map: plans hold Entry pointers
  Updater updater_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  // GPU ids (in a push's order) -> their communicator. shared_ptr: the type is complete only
  // where it is created (CUDA builds).
  std::map<std::vector<int>, std::shared_ptr<NcclCommunicator>> nccl_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_LOCAL_KVSTORE_H_
