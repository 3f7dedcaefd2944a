// The live line `tessera train` redraws on a terminal while an epoch runs, from the batch
// events of worker 0:
//   epoch 2/5 [#########-----------]  45%  56/125 batches  2400 samples/s  accuracy 0.9312
// Without batches per epoch (an iterator that cannot tell) the bar and percentage are left
// out. Plain function, thread-safe.
#ifndef TESSERA_CLIENT_PROGRESS_H_
#define TESSERA_CLIENT_PROGRESS_H_

#include <cstdint>
#include <string>

namespace tessera::client {

struct Progress {
  int epoch = 1;  // 1-based
  int num_epochs = 1;
  int64_t batch = 0;              // batches done in this epoch
  int64_t batches_per_epoch = 0;  // 0: unknown
  double samples_per_second = 0;
  std::string metrics;  // already formatted, e.g. "accuracy 0.9312"
};

// The line without a trailing newline; the bar is `width` characters between brackets.
std::string ProgressLine(const Progress& p, int width = 20);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PROGRESS_H_
