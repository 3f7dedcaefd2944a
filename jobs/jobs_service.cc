#include "jobs/jobs_service.h"

#include <deque>
#include <mutex>
#include <optional>

#include "kvstore/transport.h"
#include "rpc/token_auth.h"

namespace tessera::jobs {
namespace {

std::string Owner(grpc::CallbackServerContext* context) {
  return rpc::CallerOwner(*context->auth_context());
}

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(kvstore::ToGrpcStatus(status));
  return reactor;
}

// Streams one job's updates to a client as the coordinator hands them over, and finishes OK
// once the final record is written. Lock order: the coordinator's, then mu_ (the coordinator
// calls OnEvent/OnEnd under its lock); so the attachment is dropped outside mu_. Finish is
// the last use of `this` on its thread: OnDone may delete the reactor at once.
class AttachReactor : public grpc::ServerWriteReactor<JobUpdate>, public JobListener {
 public:
  AttachReactor(Coordinator* coordinator, const std::string& id, const std::string& owner) {
    // The history comes during Attach, before any write may start (started_).
    absl::StatusOr<std::unique_ptr<Coordinator::Attachment>> attachment =
        coordinator->Attach(id, owner, this);
    if (!attachment.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
      }
      Finish(kvstore::ToGrpcStatus(attachment.status()));
      return;
    }
    std::optional<grpc::Status> finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      attachment_ = std::move(*attachment);
      started_ = true;
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }

  void OnEvent(const RankedEvent& event) override {
    JobUpdate update;
    *update.mutable_event() = event;
    Push(std::move(update), /*last=*/false);
  }
  void OnEnd(const JobRecord& record) override {
    JobUpdate update;
    *update.mutable_record() = record;
    Push(std::move(update), /*last=*/true);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      writing_ = false;
      if (!ok) gone_ = true;
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  void OnCancel() override {  // the client left
    std::optional<grpc::Status> finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
      finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  void OnDone() override {
    std::unique_ptr<Coordinator::Attachment> attachment;
    {
      std::lock_guard<std::mutex> lock(mu_);
      attachment = std::move(attachment_);
    }
    attachment.reset();  // no listener call reaches this object after it
    delete this;
  }

 private:
  void Push(JobUpdate update, bool last) {
    std::optional<grpc::Status> finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone_ || finished_) return;
      queue_.push_back(std::move(update));
      ended_ = ended_ || last;
      if (started_) finish = WriteNextLocked();
    }
    if (finish) Finish(*finish);
  }
  // Starts the next write, or returns the status to finish with (then exactly once).
  std::optional<grpc::Status> WriteNextLocked() {
    if (writing_ || finished_) return std::nullopt;
    if (gone_) {
      finished_ = true;
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client left");
    }
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
      return std::nullopt;
    }
    if (!ended_) return std::nullopt;
    finished_ = true;
    return grpc::Status::OK;
  }

  std::mutex mu_;
  std::unique_ptr<Coordinator::Attachment> attachment_;
  std::deque<JobUpdate> queue_;  // front: being written
  bool started_ = false;         // attached: writes may start
  bool writing_ = false;
  bool ended_ = false;  // the final record is queued
  bool gone_ = false;   // the client left
  bool finished_ = false;
};

}  // namespace

grpc::ServerUnaryReactor* JobsServiceImpl::Submit(grpc::CallbackServerContext* context,
                                                  const SubmitJobRequest* request, JobRecord* reply) {
  absl::StatusOr<JobRecord> record = coordinator_->Submit(*request, Owner(context));
  if (record.ok()) *reply = *std::move(record);
  return Answer(context, record.status());
}

grpc::ServerUnaryReactor* JobsServiceImpl::List(grpc::CallbackServerContext* context,
                                                const ListJobsRequest*, ListJobsReply* reply) {
  for (JobRecord& record : coordinator_->List(Owner(context))) *reply->add_jobs() = std::move(record);
  return Answer(context, absl::OkStatus());
}

grpc::ServerWriteReactor<JobUpdate>* JobsServiceImpl::Attach(grpc::CallbackServerContext* context,
                                                             const AttachRequest* request) {
  return new AttachReactor(coordinator_, request->id(), Owner(context));
}

grpc::ServerUnaryReactor* JobsServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                  const CancelJobRequest* request, JobRecord* reply) {
  absl::StatusOr<JobRecord> record = coordinator_->Cancel(request->id(), Owner(context));
  if (record.ok()) *reply = *std::move(record);
  return Answer(context, record.status());
}

}  // namespace tessera::jobs
