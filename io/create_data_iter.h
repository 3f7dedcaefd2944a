// Data iterators by name with MXNet-style keyword arguments, as MXNet's mx.io.<Name>(**kw):
// what a job description (proto/worker.proto's DataSpec) turns into an iterator with.
//   "MNISTIter"        io/mnist_iter.h        MNISTIterOptions::FromKwargs
//   "CSVIter"          io/csv_iter.h          CSVIterOptions::FromKwargs
//   "ImageRecordIter"  io/image_record_iter.h ImageRecordIterOptions::FromKwargs
#ifndef TESSERA_IO_CREATE_DATA_ITER_H_
#define TESSERA_IO_CREATE_DATA_ITER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "io/data_iter.h"
#include "ndarray/runtime.h"

namespace tessera::io {

using IterKwargs = std::map<std::string, std::string>;

// The names above.
std::vector<std::string> DataIterNames();

// The data kinds of jobs (proto/worker.proto DataSpec.kind) and the iterators they name:
// "mnist" MNISTIter, "csv" CSVIter, "imagerecord" ImageRecordIter. INVALID_ARGUMENT for
// another kind, listing these.
std::vector<std::string> DataKinds();
absl::StatusOr<std::string> DataIterForKind(absl::string_view kind);

// Parses the options only (no file is opened): INVALID_ARGUMENT for an unknown iterator
// name, an unknown keyword or a bad value, naming them.
absl::Status CheckDataIterKwargs(absl::string_view name, const IterKwargs& kwargs);

// Whether the keyword argument `key` of these iterators names a file they read (MNISTIter's
// image and label, CSVIter's data_csv and label_csv, ImageRecordIter's path_imgrec and
// path_imgidx).
bool IsFileArgument(absl::string_view key);

// The iterator `name` made from `kwargs`; the errors of CheckDataIterKwargs and of the
// iterator's Create.
absl::StatusOr<std::unique_ptr<DataIter>> CreateDataIter(const Runtime& rt, absl::string_view name,
                                                         const IterKwargs& kwargs);

}  // namespace tessera::io

#endif  // TESSERA_IO_CREATE_DATA_ITER_H_
