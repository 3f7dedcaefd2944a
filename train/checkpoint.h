// Complete checkpoints: everything a job needs to continue exactly where it stood - the
// parameters (either format), the optimizer state (the local optimizer's, or every parameter
// server's: KVStore::SaveOptimizerStates, which holds the update counts and the learning-rate
// scheduler), the position (epoch, batches done in it), the epoch's running metric and the
// finished epochs' metrics, and the job as the caller attaches it.
//
// On disk, one folder per checkpoint, DIR/ckpt-EEEEEE-BBBBBBBBBB, holding
//   params            the "arg:NAME"/"aux:NAME" arrays (ndarray/params_file.h)
//   optimizer.states  the optimizer state's bytes
//   MANIFEST          "TSRCKPT1", the SHA-256 of the rest, a CheckpointManifest
//                     (proto/checkpoint.proto) naming every file with its size and SHA-256
// Every file is written to a temporary name, synced and renamed; the manifest goes last. So a
// folder without a manifest is a checkpoint a crash cut short, and it is never loaded; nor is
// one whose manifest or files fail their checksums (the error names the file).
//
// Thread safety: the functions are thread-safe for different folders; a CheckpointWriter is
// used from one thread.
#ifndef TESSERA_TRAIN_CHECKPOINT_H_
#define TESSERA_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <future>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ndarray/ndarray.h"
#include "ndarray/params_file.h"
#include "ndarray/runtime.h"
#include "proto/checkpoint.pb.h"

namespace tessera::train {

// When training takes a complete checkpoint, besides every epoch's end.
struct CheckpointPolicy {
  int every_batches = 0;     // within an epoch, after every N-th batch; 0: never
  double every_seconds = 0;  // after the first batch T seconds past the last one; 0: never
  int keep = 3;              // complete checkpoints kept, newest first; 0: all
};

// What one checkpoint holds. `manifest` carries the position, metrics and job; its list of
// files is filled in by the writer.
struct CheckpointContents {
  std::map<std::string, NDArray> params;  // "arg:NAME" / "aux:NAME", host copies
  ParamsFormat format = ParamsFormat::kTessera;
  std::string optimizer_state;
  CheckpointManifest manifest;
};

// "ckpt-EEEEEE-BBBBBBBBBB": names sort by (epoch, batch).
std::string CheckpointName(int epoch, int64_t batch);

// Writes `contents` as DIR/CheckpointName(epoch, batch) (created if missing, replaced if a
// crash left it incomplete), then keeps the newest `keep` complete checkpoints of DIR (0: all)
// and removes incomplete folders older than this one.
absl::Status WriteCheckpoint(const std::string& dir, CheckpointContents contents, int keep);

// Writes checkpoints on a thread of its own, one at a time, so that training waits only for
// the host copies the contents hold. Write() first waits for the previous write and returns
// its error, if any; Finish() waits for the last.
class CheckpointWriter {
 public:
  CheckpointWriter(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {}
  ~CheckpointWriter() { (void)Finish(); }
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  absl::Status Write(CheckpointContents contents);
  absl::Status Finish();

 private:
  std::string dir_;
  int keep_;
  std::future<absl::Status> pending_;
};

struct LoadedCheckpoint {
  std::string path;  // the checkpoint's folder
  CheckpointManifest manifest;
  std::map<std::string, NDArray> arg_params, aux_params;
  std::string optimizer_state;
};

// The manifest of the checkpoint folder `path`, its own checksum verified. NOT_FOUND naming
// the manifest when there is none (a checkpoint cut short, or not a checkpoint at all);
// DATA_LOSS naming it when it is damaged.
absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& path);

// The whole checkpoint at `path`: the manifest, then every file it names checked against
// its size and SHA-256 before it is decoded (DATA_LOSS naming the file). A file name that is
// not a plain name in the folder is INVALID_ARGUMENT.
absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const Runtime& rt, const std::string& path);

// The folder of the newest complete checkpoint under `dir` whose manifest is intact (damaged
// ones are passed over with a warning; ReadCheckpoint checks the files). NOT_FOUND naming
// `dir` when there is none.
absl::StatusOr<std::string> NewestCheckpoint(const std::string& dir);

}  // namespace tessera::train

#endif  // TESSERA_TRAIN_CHECKPOINT_H_
