// A worker's training as Prometheus metrics (core/metrics.h): batches and samples trained,
// the current job's throughput, and jobs by outcome.
#ifndef TESSERA_WORKER_WORKER_METRICS_H_
#define TESSERA_WORKER_WORKER_METRICS_H_

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"

namespace tessera::worker {

struct WorkerMetrics {
  prometheus::Counter& batches;
  prometheus::Counter& samples;
  // The running job's samples/s over its last batch event's window; 0 with no job running.
  prometheus::Gauge& samples_per_second;
  prometheus::Gauge& job_running;  // 1 while a job runs
  prometheus::Counter& jobs_succeeded;
  prometheus::Counter& jobs_failed;
  prometheus::Counter& jobs_cancelled;

  // Counts a finished job by its outcome and marks the worker idle.
  void JobFinished(const absl::Status& result);
};
WorkerMetrics& TrainingMetrics();

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_WORKER_METRICS_H_
