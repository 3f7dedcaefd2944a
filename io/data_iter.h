// DataIter: MXNet's data iterator interface. A training loop calls Reset() at the start of
// every epoch after the first, then Next() until it returns false, reading Value() after
// each true. provide_data()/provide_label() describe one batch before any is read, so an
// executor can be bound from them.
//
// Batches: every array of a DataBatch is a fresh CPU NDArray that later batches never
// write, so a caller (or PrefetchingIter) may keep a batch while the iterator moves on.
// Value() is only meaningful after Next() returned true.
//
// Determinism: iterators that shuffle derive each epoch's order from (seed, epoch number)
// alone (see io/permutation.h), so a run is reproducible bit for bit.
//
// Thread safety: an iterator is used by one thread at a time.
#ifndef TESSERA_IO_DATA_ITER_H_
#define TESSERA_IO_DATA_ITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "ndarray/ndarray.h"

namespace tessera::io {

// Name, batch shape (batch size first) and dtype of one input of a batch.
struct DataDesc {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
};

struct DataBatch {
  std::vector<NDArray> data, label;  // CPU arrays, batch-major, in provide_* order
  int pad = 0;                       // rows at the end that are padding (last batch)
  std::vector<int64_t> index;        // sample indices of the rows
};

class DataIter {
 public:
  virtual ~DataIter() = default;
  // Starts a new epoch (reshuffling when shuffling, from seed + epoch number).
  virtual absl::Status Reset() = 0;
  // Advances to the next batch; false at the end of the epoch.
  virtual absl::StatusOr<bool> Next() = 0;
  virtual const DataBatch& Value() const = 0;
  virtual std::vector<DataDesc> provide_data() const = 0;
  virtual std::vector<DataDesc> provide_label() const = 0;
  virtual int batch_size() const = 0;
  // Batches one epoch yields, for progress displays; -1 when the iterator cannot tell in
  // advance. An estimate where epochs differ: roll_over's carried samples, skipped bad
  // records.
  virtual int64_t num_batches() const { return -1; }
};

}  // namespace tessera::io

#endif  // TESSERA_IO_DATA_ITER_H_
