// RunPrinter: what `tessera train|launch|submit|attach` print while a job runs, from worker
// 0's events: one summary line per epoch (train and test metrics, time, samples/s) and, on a
// terminal, a progress line redrawn at each batch event (client/progress.h). It keeps the
// epochs' rows for metrics.csv and plot.svg (client/run_report.h).
//
// Thread safety: none; calls come serialized (JobClient and CoordinatorClient do so).
#ifndef TESSERA_CLIENT_RUN_PRINTER_H_
#define TESSERA_CLIENT_RUN_PRINTER_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/run_report.h"
#include "proto/worker.pb.h"

namespace tessera::client {

class RunPrinter {
 public:
  RunPrinter(FILE* out, bool progress, int num_epochs)
      : out_(out), progress_(progress), num_epochs_(num_epochs) {}

  void OnEvent(int rank, const JobEvent& event);

  const std::vector<EpochRow>& rows() const { return rows_; }
  // The last epoch's training metrics.
  std::map<std::string, double> last_train() const {
    return rows_.empty() ? std::map<std::string, double>{} : rows_.back().train;
  }
  // RUN_DIR/metrics.csv and RUN_DIR/plot.svg, when an epoch ended; RUN_DIR/round_counters.json
  // when worker 0 finished with the servers' counters.
  absl::Status WriteReport(const std::string& run_dir, const std::string& title) const;

 private:
  FILE* const out_;
  const bool progress_;
  const int num_epochs_;
  int64_t batches_per_epoch_ = 0;  // from worker 0's Started event
  std::vector<EpochRow> rows_;
  std::vector<KeyCounters> round_counters_;  // worker 0's Finished event's
};

// "name value, ..." with 4 decimals.
std::string FormatMetrics(const std::map<std::string, double>& values);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_RUN_PRINTER_H_
