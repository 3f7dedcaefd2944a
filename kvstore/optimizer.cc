// The Optimizer base: validation, MXNet's update bookkeeping, state creation, and
// SaveState/LoadState. The concrete optimizers and Create are in optimizers.cc.
#include "kvstore/optimizer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/key_slices.h"
#include "ndarray/arithmetic.h"
#include "ndarray/serialization.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the state format copies memory");

namespace tessera::kvstore {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'O', 'P', 'T', 'S', 'T'};
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void PutBytes(const char* p, size_t n) { out_.append(p, n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Reads the format back; every short read is DATA_LOSS naming the offset and the field.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - pos_; }
  absl::StatusOr<const char*> Take(size_t n, const char* what) {
    if (n > left()) {
      return absl::DataLossError(absl::StrCat("optimizer state: truncated at byte ", pos_,
                                              " reading ", what, " (", n, " bytes wanted, ", left(),
                                              " left)"));
    }
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    ASSIGN_OR_RETURN(const char* p, Take(sizeof(T), what));
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  absl::StatusOr<std::string> GetString(const char* what) {
    ASSIGN_OR_RETURN(uint32_t n, Get<uint32_t>(what));
    ASSIGN_OR_RETURN(const char* p, Take(n, what));
    return std::string(p, n);
  }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status Optimizer::CheckUpdate(int index, const NDArray& weight, const NDArray& grad) const {
  MutexLock lock(&mu_);
  return CheckUpdateLocked(index, weight, grad);
}

absl::Status Optimizer::CheckUpdateLocked(int index, const NDArray& weight,
                                          const NDArray& grad) const {
  const std::string who = absl::StrCat(name_, ": index ", index);
  if (weight.is_none() || grad.is_none()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", weight.is_none() ? "weight" : "grad", " is a none array"));
  }
  if (weight.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": needs float32 weight and grad, got ",
                                                   DTypeName(weight.dtype()), " and ",
                                                   DTypeName(grad.dtype())));
  }
  if (weight.shape() != grad.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": weight shape ",
                                                   weight.shape().ToString(), " but grad shape ",
                                                   grad.shape().ToString()));
  }
  if (weight.ctx() != grad.ctx()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": weight on ", weight.ctx().ToString(),
                                                   " but grad on ", grad.ctx().ToString()));
  }
#if !TESSERA_USE_CUDA
  if (weight.ctx().is_gpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": float32 weight on ", weight.ctx().ToString(),
                     ", but Tessera was built without CUDA (build with --config=cuda), so there "
                     "is no GPU update kernel; update a CPU copy (KVStore local_update_cpu)"));
  }
#endif
  auto it = slots_.find(KeyOf(index, weight.ctx()));
  if (it != slots_.end() && !it->second.states.empty() &&
      it->second.states[0].shape() != weight.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " on ", weight.ctx().ToString(), ": weight shape ", weight.shape().ToString(),
        " but its optimizer state has shape ", it->second.states[0].shape().ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<Optimizer::SlotKey, Optimizer::Slot>::iterator> Optimizer::SlotLocked(
    int index, const NDArray& weight, bool* created) {
  const SlotKey key = KeyOf(index, weight.ctx());
  auto it = slots_.find(key);
  *created = it == slots_.end();
  if (!*created) return it;
  Slot slot;
  for (int i = 0; i < NumStates(); ++i) {
    ASSIGN_OR_RETURN(NDArray state, Zeros(weight.runtime(), weight.shape(), weight.ctx()));
    slot.states.push_back(std::move(state));
  }
  return slots_.emplace(key, std::move(slot)).first;
}

double Optimizer::BaseLrLocked() const {
  return scheduler_ != nullptr ? (*scheduler_)(num_update_) : lr_;
}

absl::Status Optimizer::Update(int index, const NDArray& weight, const NDArray& grad,
                               int priority) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckUpdateLocked(index, weight, grad));
  // What the engine or the allocator refuses (a GPU this process does not see, memory) says
  // which update it refused.
  auto refused = [&](const absl::Status& s) {
    return absl::Status(
        s.code(), absl::StrCat(name_, ": index ", index, ", float32 ", weight.shape().ToString(),
                               " on ", weight.ctx().ToString(), ": ", s.message()));
  };
  bool new_slot = false;
  absl::StatusOr<std::map<SlotKey, Slot>::iterator> found = SlotLocked(index, weight, &new_slot);
  if (!found.ok()) return refused(found.status());
  auto it = *found;
  Slot& slot = it->second;
  const int64_t old_num_update = num_update_;
  ++slot.count;
  num_update_ = std::max(num_update_, slot.count);
  Step step;
  step.lr = BaseLrLocked();
  step.wd = wd_;
  step.t = slot.count;
  step.index = index;
  // A parameter server's slice of a big key takes its key's multipliers (key_slices.h).
  if (auto m = lr_mult_.find(DeclaredKey(index)); m != lr_mult_.end()) step.lr *= m->second;
  if (auto m = wd_mult_.find(DeclaredKey(index)); m != wd_mult_.end()) step.wd *= m->second;
  absl::Status pushed = PushUpdate(step, weight, grad, slot.states, priority);
  if (!pushed.ok()) {  // the engine refused: count nothing, keep no state
    --slot.count;
    num_update_ = old_num_update;
    if (new_slot) slots_.erase(it);
    return refused(pushed);
  }
  return absl::OkStatus();
}

absl::Status Optimizer::SetLearningRate(double lr) {
  MutexLock lock(&mu_);
  if (scheduler_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": SetLearningRate with a learning-rate scheduler (",
                     scheduler_->name(), ") set; the scheduler decides the rate"));
  }
  lr_ = lr;
  ++generation_;
  return absl::OkStatus();
}

double Optimizer::learning_rate() const {
  MutexLock lock(&mu_);
  return BaseLrLocked();
}

void Optimizer::SetLrMult(std::map<int, double> lr_mult) {
  MutexLock lock(&mu_);
  lr_mult_ = std::move(lr_mult);
  ++generation_;
}

void Optimizer::SetWdMult(std::map<int, double> wd_mult) {
  MutexLock lock(&mu_);
  wd_mult_ = std::move(wd_mult);
  ++generation_;
}

std::map<int, double> Optimizer::lr_mult() const {
  MutexLock lock(&mu_);
  return lr_mult_;
}

std::map<int, double> Optimizer::wd_mult() const {
  MutexLock lock(&mu_);
  return wd_mult_;
}

const LRScheduler* Optimizer::lr_scheduler() const {
  MutexLock lock(&mu_);
  return scheduler_.get();
}

void Optimizer::SetLrScheduler(std::unique_ptr<LRScheduler> scheduler) {
  MutexLock lock(&mu_);
  scheduler_ = std::move(scheduler);
  ++generation_;
  if (scheduler_ != nullptr && lr_given_) scheduler_->SetBaseLr(lr_);
}

int64_t Optimizer::num_update() const {
  MutexLock lock(&mu_);
  return num_update_;
}

int64_t Optimizer::update_count(int index, Context ctx) const {
  MutexLock lock(&mu_);
  auto it = slots_.find(KeyOf(index, ctx));
  return it == slots_.end() ? 0 : it->second.count;
}

absl::StatusOr<std::string> Optimizer::SaveState() const {
  MutexLock lock(&mu_);
  Writer w;
  w.PutBytes(kMagic, sizeof(kMagic));
  w.Put<uint32_t>(kVersion);
  w.PutString(name_);
  w.Put<double>(lr_);
  w.Put<int64_t>(num_update_);
  w.Put<uint32_t>(scheduler_ != nullptr ? 1 : 0);
  if (scheduler_ != nullptr) {
    w.PutString(scheduler_->name());
    const std::vector<double> state = scheduler_->SaveState();
    w.Put<uint32_t>(static_cast<uint32_t>(state.size()));
    for (double v : state) w.Put<double>(v);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(slots_.size()));
  std::vector<NDArray> arrays;
  for (const auto& [key, slot] : slots_) {
    w.Put<int32_t>(std::get<0>(key));
    w.Put<int32_t>(std::get<1>(key));
    w.Put<int32_t>(std::get<2>(key));
    w.Put<int64_t>(slot.count);
    w.Put<uint32_t>(static_cast<uint32_t>(slot.states.size()));
    arrays.insert(arrays.end(), slot.states.begin(), slot.states.end());
  }
  // EncodeArrays waits for the pending updates of each array (and returns their failure).
  ASSIGN_OR_RETURN(std::string payload, EncodeArrays(arrays));
  w.Put<uint64_t>(payload.size());
  w.out() += payload;
  return std::move(w.out());
}

absl::Status Optimizer::LoadState(const Runtime& rt, const std::string& bytes) {
  Reader r(bytes);
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": LoadState: not an optimizer state (bad magic)"));
  }
  (void)r.Take(sizeof(kMagic), "magic");
  ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>("version"));
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": LoadState: state version ", version,
                                                   " (this build reads ", kVersion, ")"));
  }
  ASSIGN_OR_RETURN(std::string saved_name, r.GetString("optimizer name"));
  if (saved_name != name_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": LoadState: the state was saved by \"", saved_name, "\""));
  }
  ASSIGN_OR_RETURN(double lr, r.Get<double>("learning rate"));
  ASSIGN_OR_RETURN(int64_t num_update, r.Get<int64_t>("num_update"));
  ASSIGN_OR_RETURN(uint32_t has_scheduler, r.Get<uint32_t>("scheduler flag"));
  std::string scheduler_name;
  std::vector<double> scheduler_state;
  if (has_scheduler != 0) {
    ASSIGN_OR_RETURN(scheduler_name, r.GetString("scheduler name"));
    ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>("scheduler state size"));
    if (n > r.left() / sizeof(double)) {
      return absl::DataLossError(absl::StrCat(name_, ": LoadState: scheduler state of ", n,
                                              " values cannot fit in what is left"));
    }
    for (uint32_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(double v, r.Get<double>("scheduler state"));
      scheduler_state.push_back(v);
    }
  }
  struct SlotHeader {
    SlotKey key;
    int64_t count;
    uint32_t states;
  };
  ASSIGN_OR_RETURN(uint32_t num_slots, r.Get<uint32_t>("slot count"));
  if (num_slots > r.left() / 24) {
    return absl::DataLossError(
        absl::StrCat(name_, ": LoadState: ", num_slots, " slots cannot fit in what is left"));
  }
  std::vector<SlotHeader> headers;
  size_t num_arrays = 0;
  for (uint32_t i = 0; i < num_slots; ++i) {
    SlotHeader h;
    ASSIGN_OR_RETURN(int32_t index, r.Get<int32_t>("slot index"));
    ASSIGN_OR_RETURN(int32_t dev_type, r.Get<int32_t>("slot device type"));
    ASSIGN_OR_RETURN(int32_t dev_id, r.Get<int32_t>("slot device id"));
    ASSIGN_OR_RETURN(h.count, r.Get<int64_t>("slot update count"));
    ASSIGN_OR_RETURN(h.states, r.Get<uint32_t>("slot state count"));
    if (dev_type < 1 || dev_type > 3 || dev_id < 0 || h.count < 0) {
      return absl::DataLossError(absl::StrCat(name_, ": LoadState: slot ", i, " of index ", index,
                                              " has device type ", dev_type, ", id ", dev_id,
                                              " and count ", h.count));
    }
    if (h.states != static_cast<uint32_t>(NumStates())) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": LoadState: index ", index, " has ", h.states, " state arrays, but this ", name_,
          " keeps ", NumStates(), " (created with other parameters?)"));
    }
    h.key = {index, dev_type, dev_id};
    num_arrays += h.states;
    headers.push_back(h);
  }
  ASSIGN_OR_RETURN(uint64_t payload_size, r.Get<uint64_t>("array payload size"));
  if (payload_size != r.left()) {
    return absl::DataLossError(absl::StrCat(name_, ": LoadState: array payload of ", payload_size,
                                            " bytes, but ", r.left(), " bytes follow"));
  }
  ASSIGN_OR_RETURN(const char* payload, r.Take(payload_size, "arrays"));
  ASSIGN_OR_RETURN(ArrayFileContents contents,
                   DecodeArrays(rt, std::string(payload, payload_size), "optimizer state"));
  if (contents.arrays.size() != num_arrays) {
    return absl::DataLossError(absl::StrCat(name_, ": LoadState: ", contents.arrays.size(),
                                            " arrays for ", num_arrays, " states"));
  }
  std::map<SlotKey, Slot> slots;
  size_t next = 0;
  for (const SlotHeader& h : headers) {
    Slot slot;
    slot.count = h.count;
    const Context ctx{static_cast<DeviceType>(std::get<1>(h.key)), std::get<2>(h.key)};
    for (uint32_t i = 0; i < h.states; ++i) {
      NDArray a = std::move(contents.arrays[next++]);
      if (a.dtype() != DType::kFloat32 ||
          (!slot.states.empty() && a.shape() != slot.states[0].shape())) {
        return absl::DataLossError(absl::StrCat(name_, ": LoadState: state ", i, " of index ",
                                                std::get<0>(h.key), " is ", DTypeName(a.dtype()),
                                                " ", a.shape().ToString()));
      }
      if (ctx != a.ctx()) {
        ASSIGN_OR_RETURN(a, CopyTo(a, ctx));
      }
      slot.states.push_back(std::move(a));
    }
    if (!slots.emplace(h.key, std::move(slot)).second) {
      return absl::DataLossError(absl::StrCat(name_, ": LoadState: index ", std::get<0>(h.key),
                                              " on ", ctx.ToString(), " saved twice"));
    }
  }

  MutexLock lock(&mu_);
  if ((scheduler_ != nullptr) != (has_scheduler != 0) ||
      (scheduler_ != nullptr && scheduler_name != scheduler_->name())) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": LoadState: saved with ", has_scheduler ? scheduler_name : "no",
                     " scheduler, but ", scheduler_ != nullptr ? scheduler_->name() : "no",
                     " scheduler is set"));
  }
  // The scheduler's load is the last step that can fail; everything after it cannot.
  if (scheduler_ != nullptr) RETURN_IF_ERROR(scheduler_->LoadState(scheduler_state));
  lr_ = lr;
  num_update_ = num_update;
  slots_ = std::move(slots);
  ++generation_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Optimizer::SaveSlot(int index) const {
  MutexLock lock(&mu_);
  auto it = slots_.find(KeyOf(index, Context::CPU()));
  if (it == slots_.end()) return std::string();
  Writer w;
  w.Put<int64_t>(it->second.count);
  ASSIGN_OR_RETURN(std::string arrays, EncodeArrays(it->second.states));
  w.out() += arrays;
  return std::move(w.out());
}

absl::Status Optimizer::LoadSlot(const Runtime& rt, int index, const std::string& bytes) {
  const std::string who = absl::StrCat(name_, ": LoadSlot of index ", index);
  if (bytes.empty()) {
    MutexLock lock(&mu_);
    slots_.erase(KeyOf(index, Context::CPU()));
    return absl::OkStatus();
  }
  Reader r(bytes);
  ASSIGN_OR_RETURN(int64_t count, r.Get<int64_t>("slot update count"));
  if (count < 0) return absl::DataLossError(absl::StrCat(who, ": update count ", count));
  ASSIGN_OR_RETURN(ArrayFileContents contents,
                   DecodeArrays(rt, bytes.substr(sizeof(int64_t)), who));
  if (contents.arrays.size() != static_cast<size_t>(NumStates())) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", contents.arrays.size(),
                                                   " state arrays, but this ", name_, " keeps ",
                                                   NumStates()));
  }
  Slot slot;
  slot.count = count;
  for (NDArray& a : contents.arrays) {
    if (a.dtype() != DType::kFloat32 || a.shape() != contents.arrays[0].shape()) {
      return absl::DataLossError(absl::StrCat(who, ": a state is ", DTypeName(a.dtype()), " ",
                                              a.shape().ToString()));
    }
    slot.states.push_back(std::move(a));
  }
  MutexLock lock(&mu_);
  slots_[KeyOf(index, Context::CPU())] = std::move(slot);
  num_update_ = std::max(num_update_, count);
  ++generation_;
  return absl::OkStatus();
}

}  // namespace tessera::kvstore
