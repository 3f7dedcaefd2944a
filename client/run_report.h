// The run report `tessera train` leaves in a job's run folder: metrics.csv (one row per
// epoch) and plot.svg (the metrics per epoch as line plots), written from the workers'
// epoch events, the parameter servers' round counters, and the final parameters. Plain functions, no state; thread-safe as long as two calls do not write
// the same path.
#ifndef TESSERA_CLIENT_RUN_REPORT_H_
#define TESSERA_CLIENT_RUN_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ndarray/params_file.h"
#include "proto/worker.pb.h"

namespace tessera::client {

// One epoch of a job (JobEvent.Epoch), with metrics by name as train/metric.h names them
// ("accuracy", "cross-entropy", "mse", "top_k_accuracy_K").
struct EpochRow {
  int epoch = 0;
  std::map<std::string, double> train;
  std::map<std::string, double> eval;
  double seconds = 0;
  double samples_per_second = 0;
};

// metrics.csv: the header "epoch,seconds,samples_per_second,train_<metric>...,eval_<metric>..."
// (the train and eval columns each the union of the rows' metric names, sorted), then one
// line per row in the given order. Numbers are the shortest text that reads back as the
// same double ("0.9765", "12.5"); a metric a row lacks is an empty cell. Lines end in "\n".
// Errors name the path (the status code from errno).
absl::Status WriteMetricsCsv(const std::string& path, const std::vector<EpochRow>& rows);

// A self-contained SVG (no scripts, fonts or external files): one panel per metric, loss
// ("cross-entropy") first, then "accuracy", then any others by name, each plotting train and
// eval against the epoch as one <polyline> per series (with a dot per point, so a single
// epoch still shows), axes with ticks and labels, and a legend. `title` heads it (escaped).
// No rows, or rows without metrics: a valid SVG saying so. Errors name the path.
absl::Status WritePlotSvg(const std::string& path, const std::vector<EpochRow>& rows,
                          const std::string& title);

// round_counters.json: the parameter servers' counters of every key part at the job's end
// (JobEvent.Finished.round_counters), one object per part with the fields of KeyCounters
// ("server_index", "key", "version", "pushes", "taken"), in the given order. Errors name the
// path.
absl::Status WriteRoundCounters(const std::string& path, const std::vector<KeyCounters>& counters);

// The parameters a job ended with (worker 0's GetParams), with MXNet's "arg:NAME" /
// "aux:NAME" keys in a parameter file of `format` (ndarray/params_file.h), so they land on
// the machine that ran `tessera` whatever file systems the workers checkpoint to. Errors
// name the path or the parameter.
absl::Status WriteParams(const std::string& path, const GetParamsReply& params,
                         ParamsFormat format = ParamsFormat::kTessera);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_RUN_REPORT_H_
