#include "worker/job_manager.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "ndarray/serialization.h"
#include "spdlog/spdlog.h"
#include "worker/worker_metrics.h"

namespace tessera::worker {

JobManager::JobManager(const Runtime& rt, JobEnvironment environment)
    : rt_(rt),
      environment_(std::move(environment)),
      incarnation_(absl::StrCat(getpid(), "-", absl::ToUnixMicros(absl::Now()))) {}

JobManager::~JobManager() {
  std::thread thread, cutter;
  std::shared_ptr<Cancellation> cancellation;
  {
    MutexLock lock(&mu_);
    thread = std::move(thread_);
    cutter = std::move(cutter_);
    cancellation = cancellation_;
  }
  if (cancellation != nullptr) cancellation->Cancel();
  if (thread.joinable()) thread.join();
  if (cutter.joinable()) cutter.join();
}

void JobManager::StopStaleRun(const JobSpec& spec) {
  std::shared_ptr<Cancellation> stale;
  std::string stale_id;
  {
    MutexLock lock(&mu_);
    if (!running_ || status_.job() != spec.name() || running_job_id_ == JobIdOf(spec)) return;
    stale = cancellation_;
    stale_id = running_job_id_;
  }
  spdlog::warn("worker: run '{}' of job '{}' replaces run '{}', which is still running here: stopping it",
               JobIdOf(spec), spec.name(), stale_id);
  // Outside mu_: cutting the streams may run gRPC reactions that report to the job.
  stale->Cancel();
  MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(kStaleRunWait);
  for (bool timed_out = false; running_ && cancellation_ == stale && !timed_out;) {
    timed_out = !idle_cv_.WaitUntil(&mu_, deadline);
  }
}

absl::Status JobManager::Start(JobSpec spec, JobEventSink sink,
                               std::function<void(absl::Status)> done) {
  StopStaleRun(spec);
  MutexLock lock(&mu_);
  if (running_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this worker is running job '", status_.job(), "'; one job at a time"));
  }
  if (thread_.joinable()) thread_.join();  // the previous job's thread has finished its work
  running_ = true;
  running_job_id_ = JobIdOf(spec);
  cancellation_ = std::make_shared<Cancellation>();
  status_ = WorkerStatus();
  status_.set_state(WorkerStatus::RUNNING);
  status_.set_job(spec.name());
  TrainingMetrics().job_running.Set(1);
  thread_ = std::thread([this, spec = std::move(spec), sink = std::move(sink),
                         done = std::move(done), cancellation = cancellation_] {
    // Every batch, not only those with an event: `tessera status` shows where a job is.
    auto progress = [&](int epoch, int batch) {
      MutexLock lock(&mu_);
      status_.set_epoch(epoch);
      status_.set_batch(batch);
    };
    absl::StatusOr<JobResult> result =
        RunJob(rt_, spec, {.events = sink, .progress = progress}, cancellation.get(), environment_);
    if (absl::IsUnavailable(result.status()) && cancellation->cancelled()) {
      // Cancel reaches the workers of a dist_sync job at different batches: the first to
      // stop leaves the others' round unfinished and the server fails their pulls
      // (UNAVAILABLE). After a Cancel that is the cancel's doing, and the job ends CANCELLED
      // as proto/worker.proto promises (keeping what happened in the message).
      result = absl::CancelledError(absl::StrCat("cancelled; then ", result.status().ToString()));
    }
    {
      MutexLock lock(&mu_);
      running_ = false;
      idle_cv_.SignalAll();
      status_.set_state(WorkerStatus::IDLE);
      status_.set_last_result(result.ok() ? "OK" : result.status().ToString());
      unavailable_since_.reset();
      if (absl::IsUnavailable(result.status())) unavailable_since_ = absl::Now();
      if (result.ok()) {
        last_ = std::move(*result);
        last_job_id_ = spec.job_id().empty() ? spec.name() : spec.job_id();
      }
    }
    TrainingMetrics().JobFinished(result.status());
    spdlog::info("worker: run '{}' of job '{}' ended: {}", JobIdOf(spec), spec.name(),
                 result.status().ToString());
    done(result.status());
  });
  return absl::OkStatus();
}

bool JobManager::Cancel() {
  std::thread finished_cutter;
  {
    MutexLock lock(&mu_);
    if (!running_) {
      if (unavailable_since_.has_value() && absl::Now() - *unavailable_since_ < kCancelGrace) {
        status_.set_last_result(absl::StrCat("CANCELLED: cancelled; then ", status_.last_result()));
      }
      unavailable_since_.reset();
      return false;
    }
    if (cancellation_->cancelled()) return true;  // asked before: the cutter is on it
    cancellation_->RequestStop();
    finished_cutter = std::move(cutter_);  // a previous job's, done or about to be
    cutter_ = std::thread([this, cancellation = cancellation_] {
      bool stopped;
      {
        MutexLock lock(&mu_);
        const auto deadline =
            std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(kCancelGrace);
        stopped = !running_ || cancellation_ != cancellation;
        // As wait_for with a predicate: the condition is checked once more at the deadline.
        for (bool timed_out = false; !stopped && !timed_out;) {
          timed_out = !idle_cv_.WaitUntil(&mu_, deadline);
          stopped = !running_ || cancellation_ != cancellation;
        }
      }
      // Outside mu_: cutting the streams may run gRPC reactions that report to the job.
      if (!stopped) {
        spdlog::info("worker: the cancelled job did not stop within {}; cutting its streams",
                     absl::FormatDuration(kCancelGrace));
        cancellation->Cancel();
      }
    });
  }
  if (finished_cutter.joinable()) finished_cutter.join();
  return true;
}

WorkerStatus JobManager::Status() const {
  MutexLock lock(&mu_);
  WorkerStatus status = status_;
  status.set_incarnation(incarnation_);
  return status;
}

absl::StatusOr<GetParamsReply> JobManager::Params(const std::string& job_id) const {
  MutexLock lock(&mu_);
  if (!last_) return absl::FailedPreconditionError("no job has finished on this worker yet");
  if (!job_id.empty() && job_id != last_job_id_) {
    return absl::FailedPreconditionError(absl::StrCat("the last job this worker finished is '",
                                                      last_job_id_, "', not '", job_id, "'"));
  }
  GetParamsReply reply;
  for (const auto& [name, array] : last_->arg_params) {
    RETURN_IF_ERROR(ToTensorProto(array, &(*reply.mutable_arg_params())[name]));
  }
  for (const auto& [name, array] : last_->aux_params) {
    RETURN_IF_ERROR(ToTensorProto(array, &(*reply.mutable_aux_params())[name]));
  }
  return reply;
}

}  // namespace tessera::worker
