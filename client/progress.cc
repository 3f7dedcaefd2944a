#include "client/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::client {

std::string ProgressLine(const Progress& p, int width) {
  std::string line = absl::StrFormat("epoch %d/%d", p.epoch, p.num_epochs);
  if (p.batches_per_epoch > 0) {
    // A padded last batch or a roll_over epoch can run one past the estimate.
    const double done = std::min(1.0, static_cast<double>(p.batch) / p.batches_per_epoch);
    const int filled = static_cast<int>(done * width);
    absl::StrAppend(&line, " [", std::string(filled, '#'), std::string(width - filled, '-'), "] ",
                    absl::StrFormat("%3d%%  %d/%d batches", static_cast<int>(done * 100), p.batch,
                                    p.batches_per_epoch));
  } else {
    absl::StrAppendFormat(&line, "  batch %d", p.batch);
  }
  absl::StrAppendFormat(&line, "  %.0f samples/s", p.samples_per_second);
  if (!p.metrics.empty()) absl::StrAppend(&line, "  ", p.metrics);
  return line;
}

}  // namespace tessera::client
