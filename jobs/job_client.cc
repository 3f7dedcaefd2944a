#include "jobs/job_client.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"

namespace tessera::jobs {

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const Cluster& cluster,
                                                              absl::Duration timeout) {
  if (cluster.workers.empty()) return absl::InvalidArgumentError("the cluster has no workers");
  std::unique_ptr<JobClient> client(new JobClient(cluster));
  for (size_t rank = 0; rank < cluster.workers.size(); ++rank) {
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     rpc::NewChannel({.target = cluster.workers[rank],
                                      .security = cluster.security,
                                      .limits = rpc::kWorkerServiceLimits.Peer()}));
    RETURN_IF_ERROR(
        rpc::WaitUntilConnected(*channel, client->Name(static_cast<int>(rank)), timeout));
    client->stubs_.push_back(Worker::NewStub(channel));
  }
  return client;
}

std::string JobClient::Name(int rank) const {
  return absl::StrCat("worker ", rank, " (", cluster_.workers[rank], ")");
}

absl::StatusOr<JobOutcome> JobClient::Run(
    const JobSpec& spec, const std::function<void(int rank, const JobEvent&)>& on_event) {
  const int n = static_cast<int>(stubs_.size());
  std::vector<grpc::ClientContext> contexts(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancel_requested_) {  // Cancel came before this Run: it is this Run's
      cancel_requested_ = false;
      return absl::CancelledError("cancelled before it started");
    }
    running_.clear();
    for (auto& c : contexts) running_.push_back(&c);
  }
  std::mutex events_mu;
  absl::Status first_error;
  int first_failed = -1;
  JobOutcome outcome;
  // One identity per run: the servers start afresh for it (proto/kvstore.proto).
  const std::string job_id =
      spec.job_id().empty()
          ? absl::StrCat(spec.name(), "-", absl::ToUnixMicros(absl::Now()), "-", getpid())
          : spec.job_id();
  outcome.job_id = job_id;
  auto run_one = [&](int rank) {
    JobSpec mine = spec;
    mine.set_job_id(job_id);
    mine.set_rank(rank);
    mine.set_num_workers(n);
    mine.mutable_data()->set_part_index(rank);
    mine.mutable_data()->set_num_parts(n);
    mine.clear_ps_hosts();
    for (const std::string& s : cluster_.servers) mine.add_ps_hosts(s);
    auto reader = stubs_[rank]->RunJob(&contexts[rank], mine);
    JobEvent event;
    while (reader->Read(&event)) {
      std::lock_guard<std::mutex> lock(events_mu);
      if (rank == 0 && event.has_finished()) {
        outcome.eval.insert(event.finished().eval().begin(), event.finished().eval().end());
        outcome.seconds = event.finished().seconds();
      }
      if (on_event) on_event(rank, event);
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) return;
    std::lock_guard<std::mutex> lock(events_mu);
    if (!first_error.ok()) return;  // a consequence of the first failure
    first_error = kvstore::FromGrpcStatus(status, Name(rank));
    first_failed = rank;
    for (int other = 0; other < n; ++other) {
      if (other != rank) contexts[other].TryCancel();
    }
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) threads.emplace_back(run_one, rank);
  for (auto& t : threads) t.join();
  bool cancelled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.clear();
    cancelled = cancel_requested_;
    cancel_requested_ = false;
  }
  if (!first_error.ok()) {
    // After a Cancel this side cut every stream, the first failed one's too: wait for all.
    WaitUntilIdle(cancelled ? -1 : first_failed);
    // After a Cancel the workers stop at different batches, and one whose round fails
    // because another stopped first may report before that one: the run was cancelled.
    if (cancelled && absl::IsUnavailable(first_error)) {
      return absl::CancelledError(absl::StrCat("cancelled; then ", first_error.ToString()));
    }
    return first_error;
  }
  return outcome;
}

absl::StatusOr<GetParamsReply> JobClient::Params(const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  GetParamsRequest request;
  request.set_job_id(job_id);
  GetParamsReply params;
  const grpc::Status status = stubs_[0]->GetParams(&context, request, &params);
  if (!status.ok()) return kvstore::FromGrpcStatus(status, Name(0));
  return params;
}

void JobClient::WaitUntilIdle(int skip_rank) {
  // The other workers' streams were cancelled on this side, so their Finish returned at once
  // while their jobs may still be stopping (until the next batch, or the end of a setup step).
  // A next Run before they have stopped would be refused with RESOURCE_EXHAUSTED. The rank
  // that failed first is skipped: its job has ended, unless it refused this job because it
  // runs someone else's. A worker that does not answer (dead, frozen) is not waited for.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (size_t rank = 0; rank < stubs_.size(); ++rank) {
    if (static_cast<int>(rank) == skip_rank) continue;
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))));
      WorkerStatus status;
      if (!stubs_[rank]->GetStatus(&context, GetStatusRequest(), &status).ok() ||
          status.state() == WorkerStatus::IDLE) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

void JobClient::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_requested_ = true;
    // A worker that has not seen its RunJob yet would take the Cancel below for a no-op and
    // then start the job: its stream is cut too (the worker cancels a job whose caller left).
    for (grpc::ClientContext* context : running_) context->TryCancel();
  }
  for (size_t rank = 0; rank < stubs_.size(); ++rank) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    CancelReply reply;
    (void)stubs_[rank]->Cancel(&context, CancelRequest(), &reply);
  }
}

absl::StatusOr<std::vector<WorkerStatus>> JobClient::Status() {
  std::vector<WorkerStatus> statuses;
  for (size_t rank = 0; rank < stubs_.size(); ++rank) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    WorkerStatus status;
    const grpc::Status s = stubs_[rank]->GetStatus(&context, GetStatusRequest(), &status);
    if (!s.ok()) return kvstore::FromGrpcStatus(s, Name(static_cast<int>(rank)));
    statuses.push_back(std::move(status));
  }
  return statuses;
}

}  // namespace tessera::jobs
