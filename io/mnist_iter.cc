#include "io/mnist_iter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "io/idx_file.h"
#include "io/kwargs.h"
#include "spdlog/spdlog.h"

namespace tessera::io {
namespace {

constexpr char kIter[] = "MNISTIter";

}  // namespace

absl::StatusOr<MNISTIterOptions> MNISTIterOptions::FromKwargs(
    const std::map<std::string, std::string>& kwargs) {
  MNISTIterOptions o;
  RETURN_IF_ERROR(KwargParser(kIter)
                      .BatchingOptions(&o)
                      .Field("image", &o.image)
                      .Field("label", &o.label)
                      .Field("flat", &o.flat)
                      .Parse(kwargs));
  return o;
}

absl::StatusOr<std::unique_ptr<MNISTIter>> MNISTIter::Create(const Runtime& rt,
                                                             const MNISTIterOptions& options) {
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MNISTIter: batch_size must be positive, got ", options.batch_size));
  }
  RETURN_IF_ERROR(CheckPart(kIter, options.part_index, options.num_parts));
  ASSIGN_OR_RETURN(IdxFile images, IdxFile::Open(options.image, 3));
  ASSIGN_OR_RETURN(IdxFile labels, IdxFile::Open(options.label, 1));
  const int64_t count = images.dims()[0];
  if (labels.dims()[0] != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MNISTIter: image file '", options.image, "' has ", count, " images but label file '",
        options.label, "' has ", labels.dims()[0], " labels"));
  }
  const auto [begin, end] = PartOf(count, options.part_index, options.num_parts);
  if (begin == end) {
    return absl::InvalidArgumentError(absl::StrCat("MNISTIter: part ", options.part_index, " of ",
                                                   options.num_parts, " of '", options.image, "' (",
                                                   count, " images) is empty"));
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> pixels, images.ReadRows(begin, end));
  ASSIGN_OR_RETURN(std::vector<uint8_t> classes, labels.ReadRows(begin, end));

  const int64_t n = end - begin, rows = images.dims()[1], cols = images.dims()[2];
  HostArray data{options.data_name, options.flat ? Shape{n, rows * cols} : Shape{n, 1, rows, cols},
                 DType::kFloat32, std::vector<uint8_t>(pixels.size() * sizeof(float))};
  float* d = reinterpret_cast<float*>(data.bytes.data());
  for (size_t i = 0; i < pixels.size(); ++i) d[i] = pixels[i] / 255.0f;
  HostArray label{options.label_name, Shape{n}, DType::kFloat32,
                  std::vector<uint8_t>(classes.size() * sizeof(float))};
  float* l = reinterpret_cast<float*>(label.bytes.data());
  for (size_t i = 0; i < classes.size(); ++i) l[i] = static_cast<float>(classes[i]);

  const NDArrayIterOptions inner_options{options.batch_size, options.shuffle, options.seed,
                                         options.last_batch_handle};
  std::vector<HostArray> data_arrays, label_arrays;
  data_arrays.push_back(std::move(data));
  label_arrays.push_back(std::move(label));
  std::unique_ptr<MNISTIter> it(new MNISTIter());
  ASSIGN_OR_RETURN(it->inner_, NDArrayIter::FromHost(rt, std::move(data_arrays),
                                                     std::move(label_arrays), inner_options));
  it->first_ = begin;
  if (!options.silent) {
    spdlog::info("MNISTIter: loaded {} images ({} of part {}/{}) from {}, shuffle={}, shape={}", n,
                 count, options.part_index, options.num_parts, options.image, options.shuffle,
                 it->provide_data()[0].shape.ToString());
  }
  return it;
}

absl::StatusOr<bool> MNISTIter::Next() {
  ASSIGN_OR_RETURN(const bool more, inner_->Next());
  if (!more) return false;
  batch_ = inner_->Value();
  for (int64_t& i : batch_.index) i += first_;  // part-local row -> sample number in the file
  return true;
}

}  // namespace tessera::io
