#include "jobs/job_client.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "jobs/recovery_policy.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"
#include "spdlog/spdlog.h"

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

absl::StatusOr<WorkerStatus> JobClient::StatusOf(Worker::Stub& stub, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  WorkerStatus status;
  const grpc::Status s = stub.GetStatus(&context, GetStatusRequest(), &status);
  if (!s.ok()) return kvstore::FromGrpcStatus(s, "the worker");
  return status;
}

absl::StatusOr<std::unique_ptr<Worker::Stub>> JobClient::AwaitReplacement(
    int rank, const std::string& lost, absl::Duration wait, const std::function<bool()>& stop) {
  const absl::Time deadline = absl::Now() + wait;
  absl::Status last = absl::UnavailableError("it did not answer");
  while (absl::Now() < deadline && !stop()) {
    // A channel of its own: the old one may wait out a reconnect back-off.
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     rpc::NewChannel({.target = cluster_.workers[rank],
                                      .security = cluster_.security,
                                      .limits = rpc::kWorkerServiceLimits.Peer()}));
    const absl::Duration step = std::min(absl::Seconds(1), deadline - absl::Now());
    if (channel->WaitForConnected(absl::ToChronoTime(absl::Now() + step))) {
      std::unique_ptr<Worker::Stub> stub = Worker::NewStub(channel);
      absl::StatusOr<WorkerStatus> status = StatusOf(*stub, absl::Seconds(5));
      if (status.ok() && status->incarnation() == lost) {
        // The process that ran the share is alive: what ended its stream was not its loss
        // (a lost server, a cut link), which a replacement would not cure.
        return absl::FailedPreconditionError(
            absl::StrCat(Name(rank), " was not lost (the same process answers)"));
      }
      if (status.ok() && status->state() == WorkerStatus::IDLE) return stub;
      last = !status.ok() ? status.status()
                          : absl::UnavailableError(absl::StrCat("it runs job '", status->job(), "'"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::UnavailableError(absl::StrCat(Name(rank), " was not replaced within ",
                                             absl::FormatDuration(wait), ": ", last.message()));
}

absl::StatusOr<JobOutcome> JobClient::Run(
    const JobSpec& spec, const std::function<void(int rank, const JobEvent&)>& on_event) {
  const int n = static_cast<int>(stubs_.size());
  const RecoveryPolicy policy = RecoveryPolicyOf(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancel_requested_) {  // Cancel came before this Run: it is this Run's
      cancel_requested_ = false;
      return absl::CancelledError("cancelled before it started");
    }
    running_.assign(n, nullptr);
  }
  std::mutex events_mu;
  absl::Status first_error;
  int first_failed = -1;
  int replacements = 0;  // (events_mu)
  JobOutcome outcome;
  // One identity per run: the servers start afresh for it (proto/kvstore.proto).
  const std::string job_id =
      spec.job_id().empty()
          ? absl::StrCat(spec.name(), "-", absl::ToUnixMicros(absl::Now()), "-", getpid())
          : spec.job_id();
  outcome.job_id = job_id;
  // Whether the run is ending: a worker failed for good, or Cancel was called.
  auto stopping = [&] {
    {
      std::lock_guard<std::mutex> lock(events_mu);
      if (!first_error.ok()) return true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_requested_;
  };
  auto run_one = [&](int rank) {
    JobSpec mine = spec;
    mine.set_job_id(job_id);
    mine.set_rank(rank);
    mine.set_num_workers(n);
    mine.mutable_data()->set_part_index(rank);
    mine.mutable_data()->set_num_parts(n);
    mine.clear_ps_hosts();
    for (const std::string& s : cluster_.servers) mine.add_ps_hosts(s);
    // Which process serves the rank: a lost one's replacement is another.
    std::string incarnation;
    if (policy.replace_workers) {
      absl::StatusOr<WorkerStatus> status = StatusOf(*stubs_[rank], absl::Seconds(5));
      if (status.ok()) incarnation = status->incarnation();
    }
    Worker::Stub* stub = stubs_[rank].get();
    std::unique_ptr<Worker::Stub> replacement_stub;
    absl::Status error;
    while (true) {
      grpc::ClientContext context;
      {
        std::lock_guard<std::mutex> lock(mu_);
        // A Cancel between two attempts would miss this stream: it is cut at once.
        if (cancel_requested_) context.TryCancel();
        running_[rank] = &context;
      }
      auto reader = stub->RunJob(&context, mine);
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
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_[rank] = nullptr;
      }
      if (status.ok()) return;
      error = kvstore::FromGrpcStatus(status, Name(rank));
      if (!policy.replace_workers || incarnation.empty() || !IsLostProcess(error) || stopping()) {
        break;
      }
      // The others wait at the servers while the rank's daemon comes back (its supervisor or
      // Kubernetes restarts it); then its share starts again and rejoins the run.
      spdlog::warn("job '{}': {} was lost ({}); waiting up to {} for its replacement",
                   spec.name(), Name(rank), error.ToString(), absl::FormatDuration(policy.wait));
      absl::StatusOr<std::unique_ptr<Worker::Stub>> back =
          AwaitReplacement(rank, incarnation, policy.wait, stopping);
      if (!back.ok()) {
        if (!absl::IsFailedPrecondition(back.status())) {  // else not lost: the error stands
          error = absl::Status(error.code(),
                               absl::StrCat(error.message(), "; ", back.status().message()));
        }
        break;
      }
      replacement_stub = *std::move(back);
      stub = replacement_stub.get();
      absl::StatusOr<WorkerStatus> now = StatusOf(*stub, absl::Seconds(5));
      incarnation = now.ok() ? now->incarnation() : "";
      mine.set_rejoin(true);
      std::lock_guard<std::mutex> lock(events_mu);
      JobEvent replaced;
      replaced.mutable_worker_replaced()->set_rank(rank);
      replaced.mutable_worker_replaced()->set_reason(error.ToString());
      replaced.mutable_worker_replaced()->set_replacement(++replacements);
      spdlog::warn("job '{}': {} was lost ({}); its replacement rejoins the run", spec.name(),
                   Name(rank), error.ToString());
      if (on_event) on_event(rank, replaced);
    }
    std::lock_guard<std::mutex> lock(events_mu);
    if (!first_error.ok()) return;  // a consequence of the first failure
    first_error = error;
    first_failed = rank;
    std::lock_guard<std::mutex> running_lock(mu_);
    for (int other = 0; other < n; ++other) {
      if (other != rank && running_[other] != nullptr) running_[other]->TryCancel();
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
    for (grpc::ClientContext* context : running_) {
      if (context != nullptr) context->TryCancel();
    }
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
