#include "worker/worker_service.h"

#include <deque>
#include <optional>

#include "core/mutex.h"
#include "kvstore/transport.h"

namespace tessera::worker {
namespace {

// Streams one job's events; finishes with the job's status once every event is written.
// Finish is called outside mu_ and is the last use of `this`: gRPC may call OnDone, which
// deletes the reactor, on another thread as soon as Finish is called.
class JobReactor : public grpc::ServerWriteReactor<JobEvent> {
 public:
  JobReactor(JobManager* jobs, const JobSpec& spec) : jobs_(jobs) {
    absl::Status started;
    {
      // Held while the job starts: a job that ended at once would otherwise call Done, and
      // Finish delete this reactor, before started_ is set.
      MutexLock lock(&mu_);
      started = jobs->Start(
          spec, [this](const JobEvent& event) { Enqueue(event); },
          [this](absl::Status status) { Done(std::move(status)); });
      started_ = started.ok();
    }
    if (!started.ok()) Finish(kvstore::ToGrpcStatus(started));
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(&mu_);
      queue_.pop_front();
      writing_ = false;
      if (!ok) queue_.clear();  // the client is gone; OnCancel stops the job
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  // Only the job this call started: a call refused as a second job, or one whose job has
  // ended, must not stop the job another client is running.
  void OnCancel() override {
    {
      MutexLock lock(&mu_);
      if (!started_ || done_) return;
    }
    jobs_->Cancel();
  }
  void OnDone() override { delete this; }

 private:
  void Enqueue(const JobEvent& event) {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(&mu_);
      queue_.push_back(event);
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  void Done(absl::Status status) {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(&mu_);
      done_ = true;
      status_ = std::move(status);
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  // Starts the next write, or returns the status to finish with once the job is done and
  // every event written (then exactly once).
  std::optional<grpc::Status> WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return std::nullopt;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
      return std::nullopt;
    }
    if (!done_) return std::nullopt;
    finished_ = true;
    return kvstore::ToGrpcStatus(status_);
  }

  JobManager* const jobs_;  // not owned
  Mutex mu_;
  std::deque<JobEvent> queue_ ABSL_GUARDED_BY(mu_);  // front: being written
  bool started_ ABSL_GUARDED_BY(mu_) = false;        // this call's job was accepted
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<JobEvent>* WorkerServiceImpl::RunJob(grpc::CallbackServerContext*,
                                                               const JobSpec* spec) {
  return new JobReactor(jobs_, *spec);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::GetStatus(grpc::CallbackServerContext* context,
                                                       const GetStatusRequest*, WorkerStatus* reply) {
  *reply = jobs_->Status();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                    const CancelRequest*, CancelReply* reply) {
  reply->set_cancelled(jobs_->Cancel());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::GetParams(grpc::CallbackServerContext* context,
                                                       const GetParamsRequest* request,
                                                       GetParamsReply* reply) {
  absl::StatusOr<GetParamsReply> params = jobs_->Params(request->job_id());
  if (params.ok()) *reply = std::move(*params);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(kvstore::ToGrpcStatus(params.status()));
  return reactor;
}

}  // namespace tessera::worker
