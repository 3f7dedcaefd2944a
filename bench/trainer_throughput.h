// Training throughput of a network through Module (forward + backward + SGD update per
// batch), shared by the benches that compare against it: train_bench (against PyTorch) and
// io_bench (against the data iterators that feed it).
#ifndef TESSERA_BENCH_TRAINER_THROUGHPUT_H_
#define TESSERA_BENCH_TRAINER_THROUGHPUT_H_

#include <vector>

#include "graph/symbol.h"
#include "io/data_iter.h"
#include "ndarray/runtime.h"

namespace tessera::bench {

// Samples/s over `batches` (all of one shape): one warm-up pass, best of three passes.
double TrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                               const std::vector<io::DataBatch>& batches);

// `count` batches of seeded uniform [0, 1) data of `data_shape` (batch first) and labels
// in [0, 10): the speed of training does not depend on the values.
std::vector<io::DataBatch> RandomBatches(const Runtime& rt, const Shape& data_shape, int count);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_TRAINER_THROUGHPUT_H_
