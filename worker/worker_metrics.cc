#include "worker/worker_metrics.h"

#include "core/metrics.h"

namespace tessera::worker {

void WorkerMetrics::JobFinished(const absl::Status& result) {
  if (result.ok()) {
    jobs_succeeded.Increment();
  } else if (absl::IsCancelled(result)) {
    jobs_cancelled.Increment();
  } else {
    jobs_failed.Increment();
  }
  job_running.Set(0);
  samples_per_second.Set(0);
}

WorkerMetrics& TrainingMetrics() {
  static auto* metrics = [] {
    prometheus::Registry& registry = ProcessMetrics();
    auto& jobs = prometheus::BuildCounter()
                     .Name("tessera_worker_jobs_total")
                     .Help("Jobs this worker finished, by result")
                     .Register(registry);
    return new WorkerMetrics{
        prometheus::BuildCounter()
            .Name("tessera_worker_batches_total")
            .Help("Training batches this worker ran")
            .Register(registry)
            .Add({}),
        prometheus::BuildCounter()
            .Name("tessera_worker_samples_total")
            .Help("Training samples this worker ran")
            .Register(registry)
            .Add({}),
        prometheus::BuildGauge()
            .Name("tessera_worker_samples_per_second")
            .Help("The running job's training samples per second on this worker (0: no job)")
            .Register(registry)
            .Add({}),
        prometheus::BuildGauge()
            .Name("tessera_worker_job_running")
            .Help("1 while this worker runs a job")
            .Register(registry)
            .Add({}),
        jobs.Add({{"result", "succeeded"}}),
        jobs.Add({{"result", "failed"}}),
        jobs.Add({{"result", "cancelled"}}),
    };
  }();
  return *metrics;
}

}  // namespace tessera::worker
