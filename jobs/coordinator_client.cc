#include "jobs/coordinator_client.h"

#include <optional>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"
#include "rpc/message_limits.h"

namespace tessera::jobs {
namespace {

// Unary calls answer at once: a coordinator that does not is frozen or gone.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
}

}  // namespace

std::string StateName(JobRecord::State state) {
  switch (state) {
    case JobRecord::QUEUED: return "queued";
    case JobRecord::RUNNING: return "running";
    case JobRecord::SUCCEEDED: return "succeeded";
    case JobRecord::FAILED: return "failed";
    case JobRecord::CANCELLED: return "cancelled";
    default: return "unknown";
  }
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, const rpc::TransportSecurity& security, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   rpc::NewChannel({.target = address,
                                    .security = security,
                                    .limits = rpc::kWorkerServiceLimits.Peer()}));
  RETURN_IF_ERROR(
      rpc::WaitUntilConnected(*channel, "coordinator (worker 0, " + address + ")", timeout));
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(address, Jobs::NewStub(channel)));
}

absl::StatusOr<JobRecord> CoordinatorClient::Submit(const SubmitJobRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  JobRecord record;
  const grpc::Status status = stub_->Submit(&context, request, &record);
  if (!status.ok()) return kvstore::FromGrpcStatus(status, Peer());
  return record;
}

absl::StatusOr<std::vector<JobRecord>> CoordinatorClient::List() {
  grpc::ClientContext context;
  SetDeadline(context);
  ListJobsReply reply;
  const grpc::Status status = stub_->List(&context, ListJobsRequest(), &reply);
  if (!status.ok()) return kvstore::FromGrpcStatus(status, Peer());
  return std::vector<JobRecord>(reply.jobs().begin(), reply.jobs().end());
}

absl::StatusOr<JobRecord> CoordinatorClient::Cancel(const std::string& id) {
  grpc::ClientContext context;
  SetDeadline(context);
  CancelJobRequest request;
  request.set_id(id);
  JobRecord record;
  const grpc::Status status = stub_->Cancel(&context, request, &record);
  if (!status.ok()) return kvstore::FromGrpcStatus(status, Peer());
  return record;
}

absl::StatusOr<JobRecord> CoordinatorClient::Attach(
    const std::string& id, const std::function<void(const RankedEvent&)>& on_event) {
  grpc::ClientContext context;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (detached_) return absl::CancelledError("detached");
    attached_ = &context;
  }
  AttachRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientReader<JobUpdate>> reader = stub_->Attach(&context, request);
  JobUpdate update;
  std::optional<JobRecord> end;
  while (reader->Read(&update)) {
    if (update.has_event() && on_event) on_event(update.event());
    if (update.has_record()) end = update.record();
  }
  const grpc::Status status = reader->Finish();
  bool detached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attached_ = nullptr;
    detached = detached_;
  }
  if (detached) return absl::CancelledError(absl::StrCat("stopped following job '", id, "'"));
  if (!status.ok()) return kvstore::FromGrpcStatus(status, Peer());
  if (!end) {
    return absl::UnavailableError(absl::StrCat(Peer(), " ended job '", id, "''s stream without its record"));
  }
  return *end;
}

void CoordinatorClient::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  detached_ = true;
  if (attached_ != nullptr) attached_->TryCancel();
}

}  // namespace tessera::jobs
