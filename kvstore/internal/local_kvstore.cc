#include "kvstore/internal/local_kvstore.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/internal/comm.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "kvstore/internal/nccl_communicator.h"
#endif

namespace tessera::kvstore::internal {
namespace {

// `a` may stand in for key's value: same shape, dtype and engine. `what` says where it is.
absl::Status CheckLike(const char* call, int key, const std::string& what, const NDArray& a,
                       const NDArray& stored) {
  if (a.is_none()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": key ", key, ": ", what, " is a none array"));
  }
  if (a.shape() != stored.shape() || a.dtype() != stored.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": key ", key, ": ", what, " is ", DTypeName(a.dtype()), " ", a.shape().ToString(),
        " but the key holds ", DTypeName(stored.dtype()), " ", stored.shape().ToString()));
  }
  if (a.runtime().engine != stored.runtime().engine) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": key ", key, ": ", what, " belongs to another runtime's engine"));
  }
  return absl::OkStatus();
}

// Groups repeated keys, as MXNet's GroupKVPairs: key -> every array given for it, in order.
absl::StatusOr<std::map<int, std::vector<NDArray>>> Group(
    const char* call, const std::vector<int>& keys,
    const std::vector<std::vector<NDArray>>& arrays) {
  if (keys.size() != arrays.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": ", keys.size(), " keys but ", arrays.size(), " lists of arrays"));
  }
  std::map<int, std::vector<NDArray>> grouped;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (arrays[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(call, ": key ", keys[i], ": no arrays"));
    }
    auto& group = grouped[keys[i]];
    group.insert(group.end(), arrays[i].begin(), arrays[i].end());
  }
  return grouped;
}

}  // namespace

absl::StatusOr<NDArray> LocalKVStore::Buffer(Entry* entry, Role role, int slot, Context ctx) {
  const BufferKey key{role, slot, ctx};
  auto it = entry->buffers.find(key);
  if (it != entry->buffers.end()) return it->second;
  const NDArray& s = entry->stored;
  ASSIGN_OR_RETURN(NDArray buffer, NDArray::Empty(s.runtime(), s.shape(), ctx, s.dtype()));
  entry->buffers.emplace(key, buffer);
  return buffer;
}

absl::Status LocalKVStore::Init(const std::vector<int>& keys, const std::vector<NDArray>& values) {
  MutexLock lock(&mu_);
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: ", keys.size(), " keys but ", values.size(), " values"));
  }
  std::set<int> seen;
  std::vector<Entry> fresh;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (entries_.count(keys[i]) > 0 || !seen.insert(keys[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Init: key ", keys[i], " is ",
                       entries_.count(keys[i]) > 0 ? "already initialized" : "given twice"));
    }
    const NDArray& v = values[i];
    if (v.is_none()) {
      return absl::InvalidArgumentError(absl::StrCat("Init: key ", keys[i], ": a none array"));
    }
    Entry e;
    // Pinned host memory makes the GPU <-> host copies of a GPU-fed key fast.
    e.host = v.ctx().is_gpu() ? Context::CPUPinned(0) : Context::CPU(0);
    ASSIGN_OR_RETURN(e.stored, NDArray::Empty(v.runtime(), v.shape(), e.host, v.dtype()));
    fresh.push_back(std::move(e));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(Copy(values[i], fresh[i].stored, /*priority=*/0));
    entries_.emplace(keys[i], std::move(fresh[i]));
  }
  return absl::OkStatus();
}

absl::Status LocalKVStore::CheckUpdater(int key, const NDArray& like) {
  if (optimizer_ == nullptr) return absl::OkStatus();  // an Updater cannot be asked
  return optimizer_->CheckUpdate(key, like, like);
}

absl::StatusOr<std::vector<LocalKVStore::PushPlan>> LocalKVStore::PreparePush(
    const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& values) {
  using Grouped = std::map<int, std::vector<NDArray>>;
  ASSIGN_OR_RETURN(Grouped grouped, Group("Push", keys, values));
  std::vector<PushPlan> plans;
  // Checks first, for every key, so nothing below allocates for a call that will fail.
  for (const auto& [key, arrays] : grouped) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Push: key ", key, " was never initialized (Init it first)"));
    }
    Entry& e = it->second;
    for (size_t i = 0; i < arrays.size(); ++i) {
      RETURN_IF_ERROR(CheckLike("Push", key, absl::StrCat("array ", i), arrays[i], e.stored));
      // "nccl" names the reduction itself (MXNet's KVStoreNCCL takes GPU arrays only);
      // "device" and "local_allreduce_device" also reduce CPU arrays, on the CPU.
      if (type() == "nccl" && !arrays[i].ctx().is_gpu()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Push: key ", key, ": array ", i, " is on ", arrays[i].ctx().ToString(),
            "; KVStore \"nccl\" reduces GPU arrays only (use \"device\" or \"local\")"));
      }
      // The device captured by value: clang 14 (thread_safety_test) cannot capture `arrays`,
      // a structured binding.
      if (allreduce() && !e.replicas.empty() &&
          std::none_of(e.replicas.begin(), e.replicas.end(),
                       [ctx = arrays[i].ctx()](const NDArray& r) { return r.ctx() == ctx; })) {
        return absl::InvalidArgumentError(
            absl::StrCat("Push: key ", key, ": array ", i, " is on ", arrays[i].ctx().ToString(),
                         ", not one of the devices of the key's first push (", e.replicas.size(),
                         " devices from ", e.replicas[0].ctx().ToString(), ")"));
      }
    }
    if (!allreduce()) {
      RETURN_IF_ERROR(CheckUpdater(key, e.stored));
    } else if (!e.replicas.empty()) {
      for (const NDArray& r : e.replicas) RETURN_IF_ERROR(CheckUpdater(key, r));
    } else {
      for (const NDArray& a : arrays) RETURN_IF_ERROR(CheckUpdater(key, a));
    }
  }
  for (const auto& [key, arrays] : grouped) {
    PushPlan plan;
    plan.key = key;
    plan.entry = &entries_.at(key);
    Entry* e = plan.entry;
    if (mode_ == LocalMode::kAllreduceDevice) {
      // In the replicas' order once there are replicas, so grads[i] belongs to replicas[i].
      std::vector<NDArray> ordered = arrays;
      if (!e->replicas.empty()) {
        ordered.clear();
        for (const NDArray& r : e->replicas) {
          for (const NDArray& a : arrays) {
            if (a.ctx() == r.ctx()) ordered.push_back(a);
          }
        }
      }
      if (ordered.size() == arrays.size() &&
          (e->replicas.empty() || ordered.size() == e->replicas.size())) {
        ASSIGN_OR_RETURN(plan.nccl, NcclFor(ordered));
      }
      if (plan.nccl != nullptr) {
        plan.sources = ordered;
        for (const NDArray& a : ordered) {
          ASSIGN_OR_RETURN(NDArray grad, Buffer(e, kGrad, 0, a.ctx()));
          plan.grads.push_back(std::move(grad));
          if (e->replicas.empty()) {
            ASSIGN_OR_RETURN(NDArray replica,
                             NDArray::Empty(a.runtime(), a.shape(), a.ctx(), a.dtype()));
            plan.new_replicas.push_back(std::move(replica));
          }
        }
        plans.push_back(std::move(plan));
        continue;
      }
    }
    const Context reduce_ctx = mode_ == LocalMode::kAllreduceDevice ? arrays[0].ctx() : e->host;
    ASSIGN_OR_RETURN(plan.merged, Buffer(e, kMerged, 0, reduce_ctx));
    for (size_t i = 0; i < arrays.size(); ++i) {
      // Summed where they are when that is where the sum runs; else copied there first (a
      // GPU's gradient to the host store, another GPU's to the reducing device).
      const bool in_place = reduce_ctx.is_gpu() ? arrays[i].ctx() == reduce_ctx : OnHost(arrays[i]);
      if (in_place) {
        plan.sources.push_back(arrays[i]);
        continue;
      }
      ASSIGN_OR_RETURN(NDArray staged, Buffer(e, kStage, static_cast<int>(i), reduce_ctx));
      plan.stage.emplace_back(arrays[i], staged);
      plan.sources.push_back(staged);
    }
    if (allreduce()) {
      std::vector<Context> devices;
      if (e->replicas.empty()) {
        for (const NDArray& a : arrays) {
          if (std::find(devices.begin(), devices.end(), a.ctx()) != devices.end()) continue;
          devices.push_back(a.ctx());
          ASSIGN_OR_RETURN(NDArray replica,
                           NDArray::Empty(a.runtime(), a.shape(), a.ctx(), a.dtype()));
          plan.new_replicas.push_back(std::move(replica));
        }
      } else {
        for (const NDArray& r : e->replicas) devices.push_back(r.ctx());
      }
      for (Context device : devices) {
        if (device == reduce_ctx) {
          plan.grads.push_back(plan.merged);
        } else {
          ASSIGN_OR_RETURN(NDArray grad, Buffer(e, kGrad, 0, device));
          plan.grads.push_back(std::move(grad));
        }
      }
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

absl::Status LocalKVStore::Apply(int key, const NDArray& grad, const NDArray& weight,
                                 int priority) {
  if (optimizer_ != nullptr) return optimizer_->Update(key, weight, grad, priority);
  if (updater_) return updater_(key, grad, weight);
  return Copy(grad, weight, priority);
}

absl::Status LocalKVStore::ExecutePush(std::vector<PushPlan>& plans, int priority) {
  const bool has_updater = optimizer_ != nullptr || static_cast<bool>(updater_);
  for (PushPlan& plan : plans) {
    Entry* e = plan.entry;
    if (plan.nccl != nullptr) {
      RETURN_IF_ERROR(PushNcclSum(plan, priority));
      if (!plan.new_replicas.empty()) {
        for (const NDArray& r : plan.new_replicas) RETURN_IF_ERROR(Copy(e->stored, r, priority));
        e->replicas = std::move(plan.new_replicas);
      }
      for (size_t j = 0; j < e->replicas.size(); ++j) {
        RETURN_IF_ERROR(has_updater ? Apply(plan.key, plan.grads[j], e->replicas[j], priority)
                                    : Copy(plan.grads[j], e->replicas[j], priority));
      }
      continue;
    }
    for (const auto& [from, to] : plan.stage) RETURN_IF_ERROR(Copy(from, to, priority));
    RETURN_IF_ERROR(SumInto(plan.sources, plan.merged, priority));
    if (!allreduce()) {
      RETURN_IF_ERROR(Apply(plan.key, plan.merged, e->stored, priority));
      continue;
    }
    if (!plan.new_replicas.empty()) {
      for (const NDArray& r : plan.new_replicas) RETURN_IF_ERROR(Copy(e->stored, r, priority));
      e->replicas = std::move(plan.new_replicas);
    }
    for (size_t j = 0; j < e->replicas.size(); ++j) {
      if (!has_updater) {  // the sum simply replaces every copy
        RETURN_IF_ERROR(Copy(plan.merged, e->replicas[j], priority));
        continue;
      }
      const NDArray& grad = plan.grads[j];
      if (!(grad.var() == plan.merged.var())) RETURN_IF_ERROR(Copy(plan.merged, grad, priority));
      RETURN_IF_ERROR(Apply(plan.key, grad, e->replicas[j], priority));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<NcclCommunicator>> LocalKVStore::NcclFor(
    const std::vector<NDArray>& arrays) {
  std::vector<int> devices;
  for (const NDArray& a : arrays) {
    if (!a.ctx().is_gpu()) return nullptr;
    if (std::find(devices.begin(), devices.end(), a.ctx().id) != devices.end()) return nullptr;
    devices.push_back(a.ctx().id);
  }
#if TESSERA_USE_CUDA
  auto it = nccl_.find(devices);
  if (it == nccl_.end()) {
    ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm, NcclCommunicator::Create(devices));
    it = nccl_.emplace(devices, std::shared_ptr<NcclCommunicator>(std::move(comm))).first;
  }
  return it->second;
#else
  return nullptr;
#endif
}

absl::Status LocalKVStore::PushNcclSum(const PushPlan& plan, int priority) {
#if TESSERA_USE_CUDA
  std::vector<engine::VarHandle> reads, writes;
  std::vector<TBlob> send, recv;
  for (size_t i = 0; i < plan.sources.size(); ++i) {
    reads.push_back(plan.sources[i].var());
    writes.push_back(plan.grads[i].var());
    send.push_back(plan.sources[i].data());
    recv.push_back(plan.grads[i].data());
  }
  // On the first device's stream; the communicator orders its own streams after it.
  const NDArray& first = plan.sources[0];
  return first.runtime().engine->PushSync(
      [comm = plan.nccl, send = std::move(send), recv = std::move(recv)](
          engine::RunContext rctx) -> absl::Status {
        const std::vector<std::vector<TBlob>> s = {send}, r = {recv};
        return comm->AllReduceSum(s, r, rctx.get_stream<cudaStream_t>());
      },
      first.ctx(), std::move(reads), std::move(writes), engine::FnProperty::kNormal, priority,
      "kvstore_nccl_allreduce");
#else
  (void)priority;
  return absl::FailedPreconditionError(
      absl::StrCat("Push: key ", plan.key, ": NCCL needs a CUDA build"));
#endif
}

absl::StatusOr<std::vector<LocalKVStore::PullPlan>> LocalKVStore::PreparePull(
    const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& outs) {
  using Grouped = std::map<int, std::vector<NDArray>>;
  ASSIGN_OR_RETURN(Grouped grouped, Group("Pull", keys, outs));
  std::vector<PullPlan> plans;
  for (auto& [key, arrays] : grouped) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pull: key ", key, " was never initialized (Init it first)"));
    }
    for (size_t i = 0; i < arrays.size(); ++i) {
      RETURN_IF_ERROR(
          CheckLike("Pull", key, absl::StrCat("output ", i), arrays[i], it->second.stored));
    }
    plans.push_back(PullPlan{&it->second, std::move(arrays)});
  }
  return plans;
}

absl::Status LocalKVStore::ExecutePull(const std::vector<PullPlan>& plans, int priority) {
  for (const PullPlan& plan : plans) {
    const Entry* e = plan.entry;
    for (const NDArray& out : plan.outs) {
      const NDArray* source = &e->stored;
      if (!e->replicas.empty()) {
        source = &e->replicas[0];
        for (const NDArray& r : e->replicas) {
          if (r.ctx() == out.ctx()) source = &r;
        }
      }
      RETURN_IF_ERROR(Copy(*source, out, priority));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalKVStore::Push(const std::vector<int>& keys,
                                const std::vector<std::vector<NDArray>>& values, int priority) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<PushPlan> plans, PreparePush(keys, values));
  return ExecutePush(plans, priority);
}

absl::Status LocalKVStore::Pull(const std::vector<int>& keys,
                                const std::vector<std::vector<NDArray>>& outs, int priority) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<PullPlan> plans, PreparePull(keys, outs));
  return ExecutePull(plans, priority);
}

absl::Status LocalKVStore::PushPull(const std::vector<int>& keys,
                                    const std::vector<std::vector<NDArray>>& values,
                                    const std::vector<std::vector<NDArray>>& outs, int priority) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<PushPlan> push, PreparePush(keys, values));
  ASSIGN_OR_RETURN(std::vector<PullPlan> pull, PreparePull(keys, outs));
  RETURN_IF_ERROR(ExecutePush(push, priority));
  return ExecutePull(pull, priority);
}

void LocalKVStore::SetUpdater(Updater updater) {
  MutexLock lock(&mu_);
  optimizer_.reset();
  updater_ = std::move(updater);
}

absl::Status LocalKVStore::SetOptimizer(std::unique_ptr<Optimizer> optimizer) {
  if (optimizer == nullptr) {
    return absl::InvalidArgumentError(
        "SetOptimizer: a null optimizer (use SetUpdater({}) to clear)");
  }
  MutexLock lock(&mu_);
  updater_ = nullptr;
  optimizer_ = std::move(optimizer);
  return absl::OkStatus();
}

Optimizer* LocalKVStore::optimizer() {
  MutexLock lock(&mu_);
  return optimizer_.get();
}

}  // namespace tessera::kvstore::internal
