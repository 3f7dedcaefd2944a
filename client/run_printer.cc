#include "client/run_printer.h"

#include <filesystem>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/progress.h"
#include "core/status_macros.h"

namespace tessera::client {

std::string FormatMetrics(const std::map<std::string, double>& values) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : values) parts.push_back(absl::StrFormat("%s %.4f", name, value));
  return absl::StrJoin(parts, ", ");
}

void RunPrinter::OnEvent(int rank, const JobEvent& event) {
  if (event.has_worker_replaced()) {  // any rank's
    const JobEvent::WorkerReplaced& r = event.worker_replaced();
    std::fprintf(out_, "%stessera: worker %d was lost (%s); its replacement rejoins the run\n",
                 progress_ ? "\r\x1b[K" : "", r.rank(), r.reason().c_str());
    std::fflush(out_);
  }
  if (rank != 0) return;
  if (event.has_started()) {
    const JobEvent::Started& s = event.started();
    batches_per_epoch_ = s.batches_per_epoch();
    if (!s.resumed_from().empty()) {
      std::fprintf(out_, "tessera: resumed from %s (epoch %d, after batch %lld)\n",
                   s.resumed_from().c_str(), s.resume_epoch() + 1,
                   static_cast<long long>(s.resume_batch()));
      std::fflush(out_);
    }
  }
  if (event.has_batch() && progress_) {
    const JobEvent::Batch& b = event.batch();
    const std::string line =
        ProgressLine({.epoch = b.epoch() + 1,
                      .num_epochs = num_epochs_,
                      .batch = b.batch(),
                      .batches_per_epoch = batches_per_epoch_,
                      .samples_per_second = b.samples_per_second(),
                      .metrics = FormatMetrics({b.metrics().begin(), b.metrics().end()})});
    // \x1b[K clears what a longer previous line left.
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    std::fflush(out_);
  }
  if (event.has_restarted()) {
    const JobEvent::Restarted& r = event.restarted();
    std::fprintf(out_, "%stessera: the job lost a process (%s); restart %d, %s\n",
                 progress_ ? "\r\x1b[K" : "", r.reason().c_str(), r.attempt(),
                 r.resumed() ? "from its newest complete checkpoint" : "from the start");
    std::fflush(out_);
  }
  if (event.has_finished()) {
    const auto& counters = event.finished().round_counters();
    round_counters_.assign(counters.begin(), counters.end());
  }
  if (event.has_epoch()) {
    const JobEvent::Epoch& e = event.epoch();
    EpochRow row{e.epoch() + 1, {e.train().begin(), e.train().end()}, {e.eval().begin(), e.eval().end()},
                 e.seconds(), e.samples_per_second()};
    // A resumed run reports its checkpoint's finished epochs first: those seen are not rows
    // again (every epoch once in metrics.csv).
    if (!rows_.empty() && row.epoch <= rows_.back().epoch) return;
    std::fprintf(out_, "%sepoch %d/%d  train: %s  test: %s  %.1f s  %.0f samples/s/worker\n",
                 progress_ ? "\r\x1b[K" : "", row.epoch, num_epochs_, FormatMetrics(row.train).c_str(),
                 FormatMetrics(row.eval).c_str(), row.seconds, row.samples_per_second);
    std::fflush(out_);
    rows_.push_back(std::move(row));
  }
}

absl::Status RunPrinter::WriteReport(const std::string& run_dir, const std::string& title) const {
  const std::filesystem::path dir(run_dir);
  if (!round_counters_.empty()) {
    RETURN_IF_ERROR(WriteRoundCounters((dir / "round_counters.json").string(), round_counters_));
  }
  if (rows_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(WriteMetricsCsv((dir / "metrics.csv").string(), rows_));
  return WritePlotSvg((dir / "plot.svg").string(), rows_, title);
}

}  // namespace tessera::client
