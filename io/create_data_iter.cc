#include "io/create_data_iter.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "io/csv_iter.h"
#include "io/image_record_iter.h"
#include "io/mnist_iter.h"

namespace tessera::io {

std::vector<std::string> DataIterNames() { return {"CSVIter", "ImageRecordIter", "MNISTIter"}; }

namespace {

absl::Status UnknownIter(absl::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat("unknown data iterator '", name, "' (",
                                                 absl::StrJoin(DataIterNames(), ", "), ")"));
}

}  // namespace

std::vector<std::string> DataKinds() { return {"mnist", "csv", "imagerecord"}; }

absl::StatusOr<std::string> DataIterForKind(absl::string_view kind) {
  if (kind == "mnist") return "MNISTIter";
  if (kind == "csv") return "CSVIter";
  if (kind == "imagerecord") return "ImageRecordIter";
  return absl::InvalidArgumentError(absl::StrCat("unknown data kind '", kind, "' (",
                                                 absl::StrJoin(DataKinds(), ", "), ")"));
}

bool IsFileArgument(absl::string_view key) {
  for (const char* file :
       {"image", "label", "data_csv", "label_csv", "path_imgrec", "path_imgidx"}) {
    if (key == file) return true;
  }
  return false;
}

absl::Status CheckDataIterKwargs(absl::string_view name, const IterKwargs& kwargs) {
  if (name == "MNISTIter") return MNISTIterOptions::FromKwargs(kwargs).status();
  if (name == "CSVIter") return CSVIterOptions::FromKwargs(kwargs).status();
  if (name == "ImageRecordIter") return ImageRecordIterOptions::FromKwargs(kwargs).status();
  return UnknownIter(name);
}

absl::StatusOr<std::unique_ptr<DataIter>> CreateDataIter(const Runtime& rt, absl::string_view name,
                                                         const IterKwargs& kwargs) {
  if (name == "MNISTIter") {
    ASSIGN_OR_RETURN(const MNISTIterOptions options, MNISTIterOptions::FromKwargs(kwargs));
    return MNISTIter::Create(rt, options);
  }
  if (name == "CSVIter") {
    ASSIGN_OR_RETURN(const CSVIterOptions options, CSVIterOptions::FromKwargs(kwargs));
    return CSVIter::Create(rt, options);
  }
  if (name == "ImageRecordIter") {
    ASSIGN_OR_RETURN(const ImageRecordIterOptions options,
                     ImageRecordIterOptions::FromKwargs(kwargs));
    return ImageRecordIter::Create(rt, options);
  }
  return UnknownIter(name);
}

}  // namespace tessera::io
