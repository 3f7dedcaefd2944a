#include "io/image_record_iter.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "io/image_augment.h"
#include "io/image_codec.h"
#include "io/image_record.h"
#include "io/kwargs.h"
#include "io/permutation.h"
#include "io/prefetching_iter.h"
#include "io/recordio.h"
#include "ndarray/ndarray.h"
#include "spdlog/spdlog.h"

namespace tessera::io {
namespace {

constexpr char kIter[] = "ImageRecordIter";

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// SplitMix64 seeded per sample, so a sample's random choices depend on nothing but
// (seed, epoch, record offset): not on threads, timing or the other samples.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t offset)
      : state_(Mix64(Mix64(Mix64(seed) ^ epoch) ^ offset)) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n]; the modulo bias (n < 2^16 here) is below 2^-48.
  int UpTo(int n) { return static_cast<int>(Next() % (static_cast<uint64_t>(n) + 1)); }

 private:
  uint64_t state_;
};

// Batches of decoded, augmented records: the synchronous core of ImageRecordIter, which
// wraps it in a PrefetchingIter.
class ImageBatchLoader final : public DataIter {
 public:
  ImageBatchLoader(const Runtime& rt, ImageRecordIterOptions options,
                   std::unique_ptr<RecordIOReader> reader, std::vector<uint64_t> offsets)
      : rt_(rt),
        o_(std::move(options)),
        reader_(std::move(reader)),
        offsets_(std::move(offsets)),
        arena_(o_.preprocess_threads) {
    StartEpoch();
  }

  absl::Status Reset() override {
    ++epoch_;
    StartEpoch();
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }

  std::vector<DataDesc> provide_data() const override {
    return {{o_.data_name, DataShape(o_.batch_size), DType::kFloat32}};
  }
  std::vector<DataDesc> provide_label() const override {
    return {{o_.label_name, LabelShape(o_.batch_size), DType::kFloat32}};
  }
  int batch_size() const override { return o_.batch_size; }
  // Before bad records are skipped.
  int64_t num_batches() const override {
    const int64_t total = static_cast<int64_t>(offsets_.size()), b = o_.batch_size;
    return o_.last_batch_handle == "pad" ? (total + b - 1) / b : total / b;
  }

 private:
  Shape DataShape(int64_t rows) const {
    return Shape{rows, o_.data_shape[0], o_.data_shape[1], o_.data_shape[2]};
  }
  Shape LabelShape(int64_t rows) const {
    return o_.label_width == 1 ? Shape{rows} : Shape{rows, o_.label_width};
  }
  void StartEpoch() {
    order_ = o_.shuffle ? SamplePermutation(static_cast<int64_t>(offsets_.size()), o_.seed, epoch_)
                        : std::vector<int64_t>();
    cursor_ = 0;
    skipped_ = 0;
  }
  int64_t OrderAt(int64_t i) const { return order_.empty() ? i : order_[i]; }
  // Decodes and augments the record at offsets_[sample] into one row of the batch.
  absl::Status LoadSample(int64_t sample, float* data, float* label, int64_t* id) const;

  const Runtime rt_;
  const ImageRecordIterOptions o_;
  const std::unique_ptr<RecordIOReader> reader_;
  const std::vector<uint64_t> offsets_;  // this part's records
  tbb::task_arena arena_;

  uint64_t epoch_ = 0;
  std::vector<int64_t> order_;  // shuffled positions into offsets_; empty: in order
  int64_t cursor_ = 0;          // next position of the epoch
  int64_t skipped_ = 0;         // bad records left out this epoch (skip_bad)
  absl::flat_hash_set<int64_t> known_bad_;  // skipped without decoding in later epochs
  DataBatch batch_;
};

absl::Status ImageBatchLoader::LoadSample(int64_t sample, float* data, float* label,
                                          int64_t* id) const {
  const uint64_t offset = offsets_[sample];
  ASSIGN_OR_RETURN(const std::string bytes, reader_->ReadAt(offset));
  ASSIGN_OR_RETURN(const ImageRecord record, UnpackImageRecord(bytes));
  if (static_cast<int>(record.labels.size()) != o_.label_width) {
    return absl::DataLossError(absl::StrCat("record has ", record.labels.size(),
                                            " labels, but label_width is ", o_.label_width));
  }
  const int channels = static_cast<int>(o_.data_shape[0]);
  const int height = static_cast<int>(o_.data_shape[1]);
  const int width = static_cast<int>(o_.data_shape[2]);
  ASSIGN_OR_RETURN(Image image, DecodeImage(record.image, channels));
  if (o_.resize > 0) image = ResizeShorter(image, o_.resize);
  if (image.height < height || image.width < width) {
    const double s = std::max(static_cast<double>(height) / image.height,
                              static_cast<double>(width) / image.width);
    image = Resize(image, std::max(height, static_cast<int>(std::ceil(image.height * s))),
                   std::max(width, static_cast<int>(std::ceil(image.width * s))));
  }
  SampleRng rng(o_.seed, epoch_, offset);
  int y = (image.height - height) / 2, x = (image.width - width) / 2;
  if (o_.rand_crop) {
    y = rng.UpTo(image.height - height);
    x = rng.UpTo(image.width - width);
  }
  const bool mirror = o_.rand_mirror && (rng.Next() & 1);
  if (y != 0 || x != 0 || image.height != height || image.width != width) {
    image = Crop(image, y, x, height, width);
  }
  ToCHW(image, mirror, o_.mean, o_.std, o_.scale, data);
  std::copy(record.labels.begin(), record.labels.end(), label);
  *id = static_cast<int64_t>(record.id);
  return absl::OkStatus();
}

absl::StatusOr<bool> ImageBatchLoader::Next() {
  const int64_t total = static_cast<int64_t>(offsets_.size());
  const int64_t batch = o_.batch_size;
  const int64_t row_floats = o_.data_shape.Size();
  ASSIGN_OR_RETURN(NDArray data, NDArray::Empty(rt_, DataShape(batch)));
  ASSIGN_OR_RETURN(NDArray label, NDArray::Empty(rt_, LabelShape(batch)));
  // Fresh arrays: no pending engine work, so after these waits the memory is ours.
  RETURN_IF_ERROR(data.WaitToWrite());
  RETURN_IF_ERROR(label.WaitToWrite());
  float* data_rows = static_cast<float*>(data.data().dptr);
  float* label_rows = static_cast<float*>(label.data().dptr);
  std::vector<int64_t> ids(batch);

  int64_t filled = 0, pad = 0, wrap = 0;
  while (filled < batch) {
    // The samples for the rows still empty: the rest of this epoch's order, then for
    // "pad" the start of the order again (counted as padding).
    std::vector<int64_t> samples;
    std::vector<bool> padding;
    while (filled + static_cast<int64_t>(samples.size()) < batch) {
      int64_t sample;
      bool is_pad = false;
      if (cursor_ < total) {
        sample = OrderAt(cursor_++);
      } else if (o_.last_batch_handle == "pad" && filled + samples.size() > 0 &&
                 static_cast<int64_t>(known_bad_.size()) < total) {
        sample = OrderAt(wrap++ % total);  // as often as needed when total < batch
        is_pad = true;
      } else {
        break;
      }
      if (known_bad_.contains(sample)) {
        if (!is_pad) ++skipped_;
        continue;
      }
      samples.push_back(sample);
      padding.push_back(is_pad);
    }
    if (samples.empty()) break;

    const int64_t base = filled;  // samples[i] loads into row base + i
    std::vector<absl::Status> status(samples.size());
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<size_t>(0, samples.size(), 1),
                        [&](const tbb::blocked_range<size_t>& range) {
                          for (size_t i = range.begin(); i != range.end(); ++i) {
                            const int64_t row = base + static_cast<int64_t>(i);
                            status[i] = LoadSample(samples[i], data_rows + row * row_floats,
                                                   label_rows + row * o_.label_width, &ids[row]);
                          }
                        });
    });
    // Keep the rows that loaded, in order, closing the gaps of the ones that did not.
    for (size_t i = 0; i < samples.size(); ++i) {
      const int64_t row = base + static_cast<int64_t>(i);
      if (!status[i].ok()) {
        const absl::Status error = absl::DataLossError(
            absl::StrCat(kIter, ": '", o_.path_imgrec, "' record at byte offset ",
                         offsets_[samples[i]], ": ", status[i].message()));
        if (!o_.skip_bad) return error;
        spdlog::warn("{} (skipped: skip_bad)", std::string(error.message()));
        known_bad_.insert(samples[i]);
        if (!padding[i]) ++skipped_;
        continue;
      }
      const int64_t to = filled++;
      if (to != row) {
        std::memmove(data_rows + to * row_floats, data_rows + row * row_floats,
                     row_floats * sizeof(float));
        std::memmove(label_rows + to * o_.label_width, label_rows + row * o_.label_width,
                     o_.label_width * sizeof(float));
        ids[to] = ids[row];
      }
      if (padding[i]) ++pad;
    }
  }

  if (filled < batch) {  // the epoch ran out: an empty batch, or "discard"
    if (skipped_ > 0) {
      spdlog::warn("{}: '{}' epoch {}: skipped {} bad records", kIter, o_.path_imgrec, epoch_,
                   skipped_);
    }
    return false;
  }
  batch_.data = {std::move(data)};
  batch_.label = {std::move(label)};
  batch_.pad = static_cast<int>(pad);
  batch_.index = std::move(ids);
  return true;
}

absl::Status CheckOptions(const ImageRecordIterOptions& o) {
  if (o.path_imgrec.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kIter, ": path_imgrec is required"));
  }
  if (o.data_shape.ndim() != 3 || (o.data_shape[0] != 1 && o.data_shape[0] != 3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kIter, ": data_shape must be (channels, height, width) with 1 or 3 channels, got ",
        o.data_shape.ToString()));
  }
  const auto positive = [](const char* name, int value) {
    return value > 0 ? absl::OkStatus()
                     : absl::InvalidArgumentError(
                           absl::StrCat(kIter, ": ", name, " must be positive, got ", value));
  };
  RETURN_IF_ERROR(positive("batch_size", o.batch_size));
  RETURN_IF_ERROR(positive("label_width", o.label_width));
  RETURN_IF_ERROR(positive("preprocess_threads", o.preprocess_threads));
  if (o.prefetch_buffer < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kIter, ": prefetch_buffer must be >= 0, got ", o.prefetch_buffer));
  }
  if (o.last_batch_handle != "pad" && o.last_batch_handle != "discard") {
    return absl::InvalidArgumentError(
        absl::StrCat(kIter, ": last_batch_handle must be 'pad' or 'discard', got '",
                     o.last_batch_handle, "'"));
  }
  for (int c = 0; c < 3; ++c) {
    if (o.std[c] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(kIter, ": std_", std::string(1, "rgb"[c]), " is 0"));
    }
  }
  return CheckPart(kIter, o.part_index, o.num_parts);
}

}  // namespace

absl::StatusOr<ImageRecordIterOptions> ImageRecordIterOptions::FromKwargs(
    const std::map<std::string, std::string>& kwargs) {
  ImageRecordIterOptions o;
  KwargParser parser(kIter);
  parser.BatchingOptions(&o)
      .Field("path_imgrec", &o.path_imgrec)
      .Field("path_imgidx", &o.path_imgidx)
      .Field("data_shape", &o.data_shape)
      .Field("label_width", &o.label_width)
      .Field("resize", &o.resize)
      .Field("rand_crop", &o.rand_crop)
      .Field("rand_mirror", &o.rand_mirror)
      .Field("scale", &o.scale)
      .Field("preprocess_threads", &o.preprocess_threads)
      .Field("prefetch_buffer", &o.prefetch_buffer)
      .Field("skip_bad", &o.skip_bad);
  for (int c = 0; c < 3; ++c) {
    const std::string channel(1, "rgb"[c]);
    parser.Field("mean_" + channel, &o.mean[c]).Field("std_" + channel, &o.std[c]);
  }
  RETURN_IF_ERROR(parser.Parse(kwargs));
  return o;
}

absl::StatusOr<std::unique_ptr<DataIter>> ImageRecordIter::Create(
    const Runtime& rt, const ImageRecordIterOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(std::unique_ptr<RecordIOReader> reader,
                   RecordIOReader::Open(options.path_imgrec));
  std::vector<uint64_t> offsets;
  if (!options.path_imgidx.empty()) {
    ASSIGN_OR_RETURN(const std::vector<RecordIndexEntry> index,
                     ReadRecordIndex(options.path_imgidx));
    const auto [begin, end] =
        PartOf(static_cast<int64_t>(index.size()), options.part_index, options.num_parts);
    for (int64_t i = begin; i < end; ++i) offsets.push_back(index[i].offset);
  } else {
    const auto [begin, end] = PartOf(static_cast<int64_t>(reader->file_size()),
                                     options.part_index, options.num_parts);
    ASSIGN_OR_RETURN(offsets, ScanRecordOffsets(options.path_imgrec, begin, end));
  }
  if (offsets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kIter, ": part ", options.part_index, " of ", options.num_parts, " of '",
                     options.path_imgrec, "' holds no records"));
  }
  if (!options.silent) {
    spdlog::info("{}: {} records (part {}/{}) from {}, batch {}, {} threads, prefetch {}", kIter,
                 offsets.size(), options.part_index, options.num_parts, options.path_imgrec,
                 Shape{options.batch_size, options.data_shape[0], options.data_shape[1],
                       options.data_shape[2]}
                     .ToString(),
                 options.preprocess_threads, options.prefetch_buffer);
  }
  auto loader =
      std::make_unique<ImageBatchLoader>(rt, options, std::move(reader), std::move(offsets));
  if (options.prefetch_buffer == 0) return loader;
  return std::make_unique<PrefetchingIter>(std::move(loader), options.prefetch_buffer);
}

}  // namespace tessera::io
