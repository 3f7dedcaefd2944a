// CSVIter: MXNet's CSV iterator. Each line of `data_csv` is one sample of
// data_shape.Size() comma-separated numbers, reshaped to data_shape; line i of the
// optional `label_csv` holds that sample's label_shape.Size() numbers. Batches are data
// (B, data_shape...) and float32 labels (B, label_shape...), except that label_shape (1)
// gives labels (B,), the shape softmax_label expects (MXNet's CSVIter returns (B,) there
// too). Without label_csv every label is 0, as in MXNet.
//
// Format: values may have spaces or tabs around them, lines may end in "\r\n", and blank
// lines at the end of a file are ignored; any other blank line is a sample with 0 values
// (an error). No header line, no quoting. Values are parsed as the dtype: int32/int64
// data must be integers and is exact (no float round trip), and a value beyond the
// dtype's range is an error. Labels are always float32.
//
// Loading: Create reads each file whole into memory and parses the lines of this part
// into host arrays, which NDArrayIter then batches; the file text is freed once parsed.
// That suits the sizes CSV is used for (up to a few GB); larger sets belong in RecordIO.
//
// Options are MXNet's, plus what its other iterators have:
//   - last_batch_handle as NDArrayIter ("pad" default). MXNet's `round_batch` kwarg is
//     accepted: true -> "pad", false -> "discard". MXNet's round_batch=true also starts
//     the next epoch after the samples it wrapped around to; "pad" restarts at the first
//     sample, so every epoch sees every sample. MXNet's round_batch=false returns the
//     short last batch with unspecified padding rows; "discard" drops it instead.
//   - shuffle/seed (MXNet's CSVIter never shuffles): epoch e visits this part's samples in
//     SamplePermutation(part size, seed, e) order.
//   - part_index/num_parts: part k of n is the contiguous line range PartOf(lines, k, n)
//     (io/kwargs.h), so the parts are disjoint and cover every line; each part parses,
//     and so validates, only its own lines.
//   - skip_bad (not in MXNet): lines that do not parse, in either file, are skipped with
//     their partner line and counted, with one warning naming the file, the count and
//     the first bad line; by default they are an error.
// DataBatch::index holds each sample's line number in the file, 0-based.
//
// Errors from Create, each naming the file and, for a line, its 1-based number and what
// was expected: NOT_FOUND for a missing file; INVALID_ARGUMENT for a line with too few
// or too many values, a value that does not parse, data and label files with different
// line counts, an empty part (or one whose lines are all bad under skip_bad), and bad
// options.
//
// Thread safety: one thread at a time (see DataIter).
#ifndef TESSERA_IO_CSV_ITER_H_
#define TESSERA_IO_CSV_ITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "io/data_iter.h"
#include "io/ndarray_iter.h"
#include "ndarray/runtime.h"

namespace tessera::io {

struct CSVIterOptions {
  std::string data_csv;   // required
  Shape data_shape;       // required
  std::string label_csv;  // "" for none: all labels 0
  Shape label_shape = Shape{1};
  int batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  std::string last_batch_handle = "pad";  // or "discard", "roll_over" (see NDArrayIter)
  int num_parts = 1;
  int part_index = 0;
  DType dtype = DType::kFloat32;  // of the data: float32, int32 or int64
  std::string data_name = "data";
  std::string label_name = "softmax_label";
  bool skip_bad = false;
  bool silent = false;  // false: log the sample count and batch shape once, at creation

  // From MXNet-style keyword arguments, e.g. {"data_shape", "(3,)"}, {"round_batch",
  // "False"}, {"label_csv", "NULL"} (MXNet's "none"), {"dtype", "int32"} ("None" is
  // float32). INVALID_ARGUMENT names an unknown key or a value that does not parse, and
  // rejects round_batch given together with last_batch_handle.
  static absl::StatusOr<CSVIterOptions> FromKwargs(
      const std::map<std::string, std::string>& kwargs);
};

class CSVIter final : public DataIter {
 public:
  // `rt` (not owned) must outlive the iterator and its batches.
  static absl::StatusOr<std::unique_ptr<CSVIter>> Create(const Runtime& rt,
                                                         const CSVIterOptions& options);

  absl::Status Reset() override { return inner_->Reset(); }
  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }
  std::vector<DataDesc> provide_data() const override { return inner_->provide_data(); }
  std::vector<DataDesc> provide_label() const override { return inner_->provide_label(); }
  int batch_size() const override { return inner_->batch_size(); }
  int64_t num_batches() const override { return inner_->num_batches(); }

  // Samples loaded for this part, and the bad lines of this part skipped under skip_bad.
  int64_t num_samples() const { return inner_->num_samples(); }
  int64_t num_skipped() const { return skipped_; }

 private:
  CSVIter() = default;

  std::unique_ptr<NDArrayIter> inner_;
  std::vector<int64_t> lines_;  // file line of each loaded sample, 0-based
  int64_t skipped_ = 0;
  DataBatch batch_;
};

}  // namespace tessera::io

#endif  // TESSERA_IO_CSV_ITER_H_
