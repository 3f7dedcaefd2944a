#include "io/ndarray_iter.h"

#include <cstring>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "io/permutation.h"

namespace tessera::io {
namespace {

using IterPtr = std::unique_ptr<NDArrayIter>;

absl::StatusOr<HostArray> ToHost(const std::string& name, const NDArray& array) {
  if (array.is_none()) {
    return absl::InvalidArgumentError(absl::StrCat("NDArrayIter: array '", name, "' is none"));
  }
  HostArray host{name, array.shape(), array.dtype(), {}};
  host.bytes.resize(array.Size() * DTypeSize(array.dtype()));
  RETURN_IF_ERROR(array.SyncCopyToCPU(host.bytes.data(), array.Size()));
  return host;
}

absl::StatusOr<std::vector<HostArray>> ToHost(const NDArrayIter::NamedArrays& arrays) {
  std::vector<HostArray> out;
  for (const auto& [name, array] : arrays) {
    ASSIGN_OR_RETURN(HostArray host, ToHost(name, array));
    out.push_back(std::move(host));
  }
  return out;
}

}  // namespace

absl::StatusOr<IterPtr> NDArrayIter::Create(const Runtime& rt, NamedArrays data, NamedArrays label,
                                            const NDArrayIterOptions& options) {
  ASSIGN_OR_RETURN(std::vector<HostArray> host_data, ToHost(data));
  ASSIGN_OR_RETURN(std::vector<HostArray> host_label, ToHost(label));
  return FromHost(rt, std::move(host_data), std::move(host_label), options);
}

absl::StatusOr<IterPtr> NDArrayIter::Create(const Runtime& rt, const NDArray& data,
                                            const NDArray& label, const NDArrayIterOptions& options,
                                            const std::string& data_name,
                                            const std::string& label_name) {
  NamedArrays labels;
  if (!label.is_none()) labels.emplace_back(label_name, label);
  return Create(rt, {{data_name, data}}, std::move(labels), options);
}

absl::StatusOr<IterPtr> NDArrayIter::FromHost(const Runtime& rt, std::vector<HostArray> data,
                                              std::vector<HostArray> label,
                                              const NDArrayIterOptions& options) {
  IterPtr it(new NDArrayIter());
  if (options.last_batch_handle == "pad") {
    it->last_batch_ = LastBatch::kPad;
  } else if (options.last_batch_handle == "discard") {
    it->last_batch_ = LastBatch::kDiscard;
  } else if (options.last_batch_handle == "roll_over") {
    it->last_batch_ = LastBatch::kRollOver;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("NDArrayIter: unknown last_batch_handle '",
                                                   options.last_batch_handle,
                                                   "' (want pad, discard or roll_over)"));
  }
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NDArrayIter: batch_size must be positive, got ", options.batch_size));
  }
  if (data.empty()) return absl::InvalidArgumentError("NDArrayIter: no data array given");

  std::set<std::string> names;
  const HostArray& first = data.front();
  for (const std::vector<HostArray>* group : {&data, &label}) {
    for (const HostArray& a : *group) {
      if (a.name.empty() || !names.insert(a.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("NDArrayIter: array name '", a.name, "' is empty or used twice"));
      }
      if (a.shape.ndim() < 1 || a.shape[0] <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NDArrayIter: array '", a.name, "' of shape ", a.shape.ToString(), " has no samples"));
      }
      if (a.shape[0] != first.shape[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat("NDArrayIter: sample counts differ: '", first.name, "' has ",
                         first.shape[0], " samples but '", a.name, "' has ", a.shape[0]));
      }
      const size_t want = static_cast<size_t>(a.shape.Size()) * DTypeSize(a.dtype);
      if (DTypeSize(a.dtype) == 0 || a.bytes.size() != want) {
        return absl::InvalidArgumentError(
            absl::StrCat("NDArrayIter: array '", a.name, "' holds ", a.bytes.size(), " bytes, but ",
                         a.shape.ToString(), " of ", DTypeName(a.dtype), " needs ", want));
      }
    }
  }
  it->rt_ = rt;
  it->options_ = options;
  it->data_ = std::move(data);
  it->label_ = std::move(label);
  it->num_samples_ = it->data_.front().shape[0];
  it->StartEpoch();
  return it;
}

void NDArrayIter::StartEpoch() {
  if (options_.shuffle) {
    order_ = SamplePermutation(num_samples_, options_.seed, epoch_);
  } else if (static_cast<int64_t>(order_.size()) != num_samples_) {
    order_.resize(num_samples_);
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }
  cursor_ = 0;
  batch_ = DataBatch();
}

absl::Status NDArrayIter::Reset() {
  // Leftovers carry over only into the epoch right after the one that left them.
  if (!carry_is_fresh_) carry_.clear();
  carry_is_fresh_ = false;
  ++epoch_;
  StartEpoch();
  return absl::OkStatus();
}

absl::Status NDArrayIter::HardReset() {
  carry_is_fresh_ = false;
  return Reset();
}

absl::StatusOr<bool> NDArrayIter::Next() {
  const int64_t b = options_.batch_size;
  const int64_t available = static_cast<int64_t>(carry_.size()) + (num_samples_ - cursor_);
  std::vector<int64_t> rows;
  rows.reserve(b);
  int pad = 0;
  if (available >= b) {
    rows = std::move(carry_);
    carry_.clear();
    while (static_cast<int64_t>(rows.size()) < b) rows.push_back(order_[cursor_++]);
  } else {
    // The incomplete end of the epoch (carry_ is empty unless rolling over).
    rows = std::move(carry_);
    carry_.clear();
    rows.insert(rows.end(), order_.begin() + cursor_, order_.end());
    cursor_ = num_samples_;
    if (rows.empty()) return false;
    if (last_batch_ == LastBatch::kDiscard) return false;
    if (last_batch_ == LastBatch::kRollOver) {
      carry_ = std::move(rows);
      carry_is_fresh_ = true;
      return false;
    }
    pad = static_cast<int>(b - static_cast<int64_t>(rows.size()));
    for (int64_t k = 0; k < pad; ++k) rows.push_back(order_[k % num_samples_]);
  }
  DataBatch batch;
  ASSIGN_OR_RETURN(batch.data, Gather(data_, rows));
  ASSIGN_OR_RETURN(batch.label, Gather(label_, rows));
  batch.pad = pad;
  batch.index = std::move(rows);
  batch_ = std::move(batch);
  return true;
}

absl::StatusOr<std::vector<NDArray>> NDArrayIter::Gather(const std::vector<HostArray>& arrays,
                                                         const std::vector<int64_t>& rows) const {
  std::vector<NDArray> out;
  std::vector<uint8_t> scratch;
  for (const HostArray& a : arrays) {
    const size_t row_bytes = a.bytes.size() / num_samples_;
    scratch.resize(row_bytes * rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(scratch.data() + i * row_bytes, a.bytes.data() + rows[i] * row_bytes, row_bytes);
    }
    Shape shape = a.shape;
    shape[0] = static_cast<int64_t>(rows.size());
    ASSIGN_OR_RETURN(NDArray array, NDArray::Empty(rt_, shape, Context::CPU(), a.dtype));
    RETURN_IF_ERROR(array.SyncCopyFromCPU(scratch.data(), array.Size()));
    out.push_back(std::move(array));
  }
  return out;
}

int64_t NDArrayIter::num_batches() const {
  const int64_t b = options_.batch_size;
  return last_batch_ == LastBatch::kPad ? (num_samples_ + b - 1) / b : num_samples_ / b;
}

std::vector<DataDesc> NDArrayIter::Describe(const std::vector<HostArray>& arrays) const {
  std::vector<DataDesc> out;
  for (const HostArray& a : arrays) {
    Shape shape = a.shape;
    shape[0] = options_.batch_size;
    out.push_back({a.name, shape, a.dtype});
  }
  return out;
}

}  // namespace tessera::io
