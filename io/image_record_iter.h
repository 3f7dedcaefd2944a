// ImageRecordIter: MXNet's ImageRecordIter. Reads image records (io/image_record.h) from a
// RecordIO file, decodes them (JPEG/PNG), augments them and batches them as float32
// (B, C, H, W) data and (B,) labels ((B, label_width) when label_width > 1).
//
// Pipeline per sample, MXNet's default augmenter in its order:
//   decode to C channels (data_shape[0]: 1 gray, 3 RGB)
//   -> resize > 0: shorter side to `resize` (bilinear)
//   -> an image still smaller than the H x W crop is scaled up to cover it (MXNet fails)
//   -> crop H x W: uniformly random with rand_crop, else centred
//   -> mirror horizontally with probability 1/2 when rand_mirror
//   -> (pixel - mean[c]) * scale / std[c], written straight into the batch.
// Decoding and augmentation of a batch's samples run on `preprocess_threads` threads (a
// oneTBB arena; the thread asking for the batch is one of them), and whole batches are
// prepared `prefetch_buffer` ahead on a background thread (PrefetchingIter).
//
// Determinism: every random choice of a sample comes from its own generator seeded by
// (seed, epoch, the sample's position in the file), so batches are bit-identical for a
// given seed whatever the thread count or timing.
//
// Records and partitions: with path_imgidx the records are those the index lists, in its
// order, and part k of n is the contiguous slice PartOf(count, k, n) of them; without it,
// part k is every record that starts in bytes [size*k/n, size*(k+1)/n) of the file (the
// reader re-syncs at the boundary). Either way the parts cover each record once.
// shuffle visits the part in SamplePermutation(count, seed, epoch) order.
// DataBatch::index holds each record's id (its header's id field; im2rec numbers images).
//
// last_batch_handle: "pad" (MXNet's round_batch, default) fills the last batch from the
// start of the epoch's order and reports the filled rows in DataBatch::pad; "discard"
// drops an incomplete last batch. roll_over is not supported (INVALID_ARGUMENT).
//
// Bad records: a record that does not unpack or decode, or whose label count is not
// label_width, makes Next() fail with DATA_LOSS naming the file, the record's offset and
// the cause. With skip_bad the record is left out instead (its place in the batch goes to
// the next record), logged once, and counted in the epoch's end-of-epoch log line.
//
// Thread safety: one thread at a time (see DataIter).
#ifndef TESSERA_IO_IMAGE_RECORD_ITER_H_
#define TESSERA_IO_IMAGE_RECORD_ITER_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/shape.h"
#include "io/data_iter.h"
#include "ndarray/runtime.h"

namespace tessera::io {

struct ImageRecordIterOptions {
  std::string path_imgrec;          // required
  std::string path_imgidx;          // optional .idx
  Shape data_shape;                 // (C, H, W), required; C is 1 or 3
  int label_width = 1;
  int batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  int num_parts = 1;
  int part_index = 0;
  int resize = -1;  // > 0: shorter side resized to this before cropping
  bool rand_crop = false;
  bool rand_mirror = false;
  std::array<float, 3> mean = {0, 0, 0};  // mean_r, mean_g, mean_b
  std::array<float, 3> std = {1, 1, 1};   // std_r, std_g, std_b
  float scale = 1;
  int preprocess_threads = 4;
  int prefetch_buffer = 4;                // batches prepared ahead; 0: none
  std::string last_batch_handle = "pad";  // or "discard"
  bool skip_bad = false;
  std::string data_name = "data";
  std::string label_name = "softmax_label";
  bool silent = false;  // false: log the record count and batch shape once, at creation

  // MXNet's keyword arguments ("path_imgrec", "data_shape": "(3,224,224)", "mean_r",
  // "round_batch", ...). INVALID_ARGUMENT names an unknown key or a bad value.
  static absl::StatusOr<ImageRecordIterOptions> FromKwargs(
      const std::map<std::string, std::string>& kwargs);
};

class ImageRecordIter {
 public:
  // INVALID_ARGUMENT for bad options (naming them), NOT_FOUND / DATA_LOSS for the files,
  // INVALID_ARGUMENT for an empty part. `rt` (not owned) must outlive the iterator and its
  // batches.
  static absl::StatusOr<std::unique_ptr<DataIter>> Create(const Runtime& rt,
                                                          const ImageRecordIterOptions& options);
};

}  // namespace tessera::io

#endif  // TESSERA_IO_IMAGE_RECORD_ITER_H_
