// NDArrayIter: MXNet's in-memory iterator over named data and label arrays whose first
// dimension is the sample. The arrays are copied to host memory once, at creation; each
// batch gathers its rows into fresh CPU arrays.
//
// last_batch_handle, when the sample count N is not a multiple of batch_size B (as MXNet):
//   "pad"       the last batch wraps around to the start of this epoch's order to fill up;
//               DataBatch::pad counts the wrapped rows.
//   "discard"   the incomplete last batch is dropped.
//   "roll_over" the leftover samples are kept and start the next epoch's first batch
//               (followed by that epoch's order), so no sample is skipped.
// Where we differ from MXNet's Python class, on purpose:
//   - Shuffling: epoch e visits SamplePermutation(N, seed, e) (io/permutation.h), not
//     NumPy's global generator. Creation starts epoch 0; each Reset() starts the next.
//   - pad is 0 on roll_over's first batch: MXNet reports the carried-over row count
//     there, but those rows are real samples, and an evaluation trimming `pad` rows
//     would drop real ones.
//   - N < B: "pad" wraps as often as needed (MXNet returns a short batch) and
//     "roll_over" keeps collecting until B samples are there.
// DataBatch::index holds the original row numbers of the batch's samples.
//
// Thread safety: one thread at a time (see DataIter).
#ifndef TESSERA_IO_NDARRAY_ITER_H_
#define TESSERA_IO_NDARRAY_ITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "io/data_iter.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera::io {

struct NDArrayIterOptions {
  int batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  std::string last_batch_handle = "pad";  // "pad", "discard" or "roll_over"
};

// A named array in host memory, row-major, first dimension = samples.
struct HostArray {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::vector<uint8_t> bytes;  // shape.Size() * DTypeSize(dtype) bytes
};

class NDArrayIter final : public DataIter {
 public:
  using NamedArrays = std::vector<std::pair<std::string, NDArray>>;

  // INVALID_ARGUMENT for: no data array, a none array, sample counts that differ (naming
  // both arrays and counts), duplicate names, batch_size <= 0, an unknown
  // last_batch_handle. `rt` (not owned) must outlive the iterator and its batches.
  static absl::StatusOr<std::unique_ptr<NDArrayIter>> Create(const Runtime& rt, NamedArrays data,
                                                             NamedArrays label,
                                                             const NDArrayIterOptions& options);
  // One data array and an optional label (a none NDArray for none), named as MXNet does.
  static absl::StatusOr<std::unique_ptr<NDArrayIter>> Create(
      const Runtime& rt, const NDArray& data, const NDArray& label,
      const NDArrayIterOptions& options, const std::string& data_name = "data",
      const std::string& label_name = "softmax_label");
  // From host arrays, without a device round trip (what MNISTIter uses).
  static absl::StatusOr<std::unique_ptr<NDArrayIter>> FromHost(const Runtime& rt,
                                                               std::vector<HostArray> data,
                                                               std::vector<HostArray> label,
                                                               const NDArrayIterOptions& options);

  absl::Status Reset() override;
  // Like Reset() but drops roll_over leftovers (MXNet's hard_reset).
  absl::Status HardReset();
  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }
  std::vector<DataDesc> provide_data() const override { return Describe(data_); }
  std::vector<DataDesc> provide_label() const override { return Describe(label_); }
  int batch_size() const override { return options_.batch_size; }
  // pad: ceil(N / B); discard and roll_over: floor(N / B) (roll_over's epochs that use
  // carried samples yield one more).
  int64_t num_batches() const override;

  int64_t num_samples() const { return num_samples_; }
  // Epochs started so far minus one: 0 after creation, +1 per Reset().
  uint64_t epoch() const { return epoch_; }

 private:
  enum class LastBatch { kPad, kDiscard, kRollOver };

  NDArrayIter() = default;
  std::vector<DataDesc> Describe(const std::vector<HostArray>& arrays) const;
  void StartEpoch();
  absl::StatusOr<std::vector<NDArray>> Gather(const std::vector<HostArray>& arrays,
                                              const std::vector<int64_t>& rows) const;

  Runtime rt_;
  NDArrayIterOptions options_;
  LastBatch last_batch_ = LastBatch::kPad;
  std::vector<HostArray> data_, label_;
  int64_t num_samples_ = 0;
  uint64_t epoch_ = 0;
  std::vector<int64_t> order_;  // this epoch's sample order
  int64_t cursor_ = 0;          // next position in order_
  // roll_over: samples left from the previous epoch, served before order_.
  std::vector<int64_t> carry_;
  bool carry_is_fresh_ = false;  // carry_ was set by the epoch now running
  DataBatch batch_;
};

}  // namespace tessera::io

#endif  // TESSERA_IO_NDARRAY_ITER_H_
