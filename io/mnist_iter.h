// MNISTIter: MXNet's MNIST iterator. Reads an IDX image file (N x rows x cols unsigned
// bytes) and an IDX label file (N unsigned bytes), scales pixels to float32 in [0, 1]
// (v / 255, so white is exactly 1; MXNet divides by 256) and batches them as data
// (B, 1, rows, cols), or (B, rows*cols) when `flat`, and float32 labels (B,).
//
// Options and defaults are MXNet's: shuffle on, seed 0, and the incomplete last batch
// dropped (MXNet's MNISTIter has no other mode; last_batch_handle makes it selectable).
// Partitioning for distributed training: part k of n is the contiguous slice
// [floor(N*k/n), floor(N*(k+1)/n)) of the file order, as MXNet's GetPart, so the parts
// cover every sample exactly once; shuffling then permutes within the part. Unlike MXNet,
// which shuffles once, each epoch reshuffles (SamplePermutation(part size, seed, epoch)).
// DataBatch::index holds sample numbers in the file (not in the part).
//
// Errors from Create: see IdxFile (NOT_FOUND, INVALID_ARGUMENT for a wrong magic number,
// DATA_LOSS for truncated files, naming file and offset); INVALID_ARGUMENT naming both
// files when image and label counts differ, and for bad options.
//
// Thread safety: one thread at a time (see DataIter).
#ifndef TESSERA_IO_MNIST_ITER_H_
#define TESSERA_IO_MNIST_ITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/data_iter.h"
#include "io/ndarray_iter.h"
#include "ndarray/runtime.h"

namespace tessera::io {

struct MNISTIterOptions {
  std::string image = "./train-images-idx3-ubyte";
  std::string label = "./train-labels-idx1-ubyte";
  int batch_size = 128;
  bool shuffle = true;
  bool flat = false;
  uint64_t seed = 0;
  bool silent = false;  // false: log the sample count and batch shape once, at creation
  int num_parts = 1;
  int part_index = 0;
  std::string last_batch_handle = "discard";  // or "pad", "roll_over" (see NDArrayIter)
  std::string data_name = "data";
  std::string label_name = "softmax_label";

  // From MXNet-style keyword arguments, e.g. {"batch_size", "64"}, {"flat", "True"}.
  // INVALID_ARGUMENT names an unknown key or a value that does not parse.
  static absl::StatusOr<MNISTIterOptions> FromKwargs(
      const std::map<std::string, std::string>& kwargs);
};

class MNISTIter final : public DataIter {
 public:
  // `rt` (not owned) must outlive the iterator and its batches.
  static absl::StatusOr<std::unique_ptr<MNISTIter>> Create(const Runtime& rt,
                                                           const MNISTIterOptions& options);

  absl::Status Reset() override { return inner_->Reset(); }
  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }
  std::vector<DataDesc> provide_data() const override { return inner_->provide_data(); }
  std::vector<DataDesc> provide_label() const override { return inner_->provide_label(); }
  int batch_size() const override { return inner_->batch_size(); }
  int64_t num_batches() const override { return inner_->num_batches(); }

  // This part's samples: [first_sample(), first_sample() + num_samples()) of the file.
  int64_t first_sample() const { return first_; }
  int64_t num_samples() const { return inner_->num_samples(); }

 private:
  MNISTIter() = default;

  std::unique_ptr<NDArrayIter> inner_;
  int64_t first_ = 0;
  DataBatch batch_;
};

}  // namespace tessera::io

#endif  // TESSERA_IO_MNIST_ITER_H_
