#include "jobs/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "jobs/job_client.h"
#include "jobs/job_spec_check.h"
#include "jobs/recovery.h"
#include "spdlog/spdlog.h"

namespace tessera::jobs {
namespace {

bool Finished(JobRecord::State state) {
  return state != JobRecord::QUEUED && state != JobRecord::RUNNING;
}

// Ids name folders of the store: nothing that could climb out of it.
absl::Status CheckId(const std::string& id) {
  const bool valid = !id.empty() && id.size() <= 200 && id != "." && id != ".." &&
                     std::all_of(id.begin(), id.end(), [](char c) {
                       return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                              c == '_' || c == '.';
                     });
  if (!valid) return absl::InvalidArgumentError(absl::StrCat("'", id, "' is not a job id"));
  return absl::OkStatus();
}

// The job's name in an id: letters, digits, '.', '_' and '-' kept, anything else '-'.
std::string IdStem(const std::string& name) {
  std::string stem = name.substr(0, 64);
  for (char& c : stem) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') c = '-';
  }
  return stem.empty() || stem == "." || stem == ".." ? "job" : stem;
}

}  // namespace

ClusterRunner GrpcClusterRunner(rpc::TransportSecurity security) {
  return [security = std::move(security)](
             const SubmitJobRequest& request,
             const std::function<void(int rank, const JobEvent&)>& on_event,
             Cancellation* cancellation) -> absl::StatusOr<std::map<std::string, double>> {
    const Cluster cluster{.workers = {request.workers().begin(), request.workers().end()},
                          .servers = {request.servers().begin(), request.servers().end()},
                          .security = security};
    auto run = [&](const JobSpec& spec, absl::Duration connect_wait) -> absl::StatusOr<JobOutcome> {
      RETURN_IF_ERROR(WaitForCluster(cluster, connect_wait));
      ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client, JobClient::Connect(cluster, connect_wait));
      // A cancel that came while connecting runs at once here, and Run then returns CANCELLED.
      const std::unique_ptr<Cancellation::Registration> registration =
          cancellation->OnCancel([&client] { client->Cancel(); });
      return client->Run(spec, on_event);
    };
    ASSIGN_OR_RETURN(
        JobOutcome outcome,
        RunWithRecovery(
            request.spec(), run, [&](const JobEvent& restarted) { on_event(0, restarted); },
            [cancellation] { return cancellation->cancelled(); }));
    return outcome.eval;
  };
}

Coordinator::Attachment::~Attachment() {
  MutexLock lock(&owner_->mu_);
  for (auto& [id, job] : owner_->jobs_) job->listeners.erase(listener_);
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options,
                                                               ClusterRunner runner) {
  if (options.max_queued < 0 || options.max_finished < 0) {
    return absl::InvalidArgumentError("the job queue's bounds must not be negative");
  }
  JobStore store;
  if (!options.state_dir.empty()) {
    ASSIGN_OR_RETURN(store, JobStore::Open(options.state_dir));
  }
  ASSIGN_OR_RETURN(std::vector<StoredJob> stored, store.LoadAll());
  std::sort(stored.begin(), stored.end(), [](const StoredJob& a, const StoredJob& b) {
    return a.record.sequence() < b.record.sequence();
  });
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(runner), std::move(store)));
  {
    MutexLock lock(&c->mu_);
    for (StoredJob& s : stored) {
      auto job = std::make_unique<Job>();
      job->request = std::move(s.request);
      job->record = std::move(s.record);
      job->events = std::move(s.events);
      c->next_sequence_ = std::max(c->next_sequence_, job->record.sequence() + 1);
      const std::string id = job->record.id();
      if (job->record.state() == JobRecord::QUEUED) c->queue_.push_back(id);
      if (job->record.state() == JobRecord::RUNNING) {
        // The coordinating worker died while the job ran: the job runs again first, from its
        // newest checkpoint (jobs/recovery.h), as a new run for the servers.
        JobSpec& spec = *job->request.mutable_spec();
        const int restarts = job->record.restarts() + 1;
        spec.set_job_id(absl::StrCat(id, ".c", restarts));
        if (!spec.checkpoint_prefix().empty()) {
          spec.set_resume("auto");
          spec.set_version(std::max<uint32_t>(spec.version(), 3));
        }
        job->record.set_restarts(restarts);
        job->record.set_run_id(spec.job_id());
        job->record.set_state(JobRecord::QUEUED);
        RankedEvent restarted;
        JobEvent::Restarted* r = restarted.mutable_event()->mutable_restarted();
        r->set_attempt(restarts);
        r->set_reason("the coordinating worker restarted while the job ran");
        r->set_resumed(!spec.checkpoint_prefix().empty());
        r->set_job_id(spec.job_id());
        job->events.push_back(restarted);
        if (absl::Status appended = c->store_.AppendEvent(id, restarted); !appended.ok()) {
          spdlog::warn("jobs: an event of '{}' is not kept: {}", id, appended.ToString());
        }
        c->queue_.push_front(id);
        spdlog::warn("jobs: '{}' was running when this worker stopped; it runs again first", id);
        c->Save(*job);
      }
      c->jobs_[id] = std::move(job);
    }
    c->DropOldFinished();
  }
  c->thread_ = std::thread([c = c.get()] { c->RunLoop(); });
  return c;
}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Stop() {
  std::shared_ptr<Cancellation> cancellation;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cancellation = cancellation_;
    queue_cv_.SignalAll();
  }
  if (cancellation != nullptr) cancellation->Cancel();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<JobRecord> Coordinator::Submit(SubmitJobRequest request, const std::string& owner) {
  if (request.workers().empty()) return absl::InvalidArgumentError("the job names no workers");
  if (request.spec().name().empty()) return absl::InvalidArgumentError("the job has no name");
  RETURN_IF_ERROR(CheckJobSpec(request.spec()));
  JobSpec& spec = *request.mutable_spec();
  if (options_.batch_event_every > 0 &&
      (spec.batch_event_every() <= 0 || spec.batch_event_every() > options_.batch_event_every)) {
    spec.set_batch_event_every(options_.batch_event_every);
  }
  MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is stopping");
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job queue is full: ", queue_.size(), " jobs wait, at most ", options_.max_queued,
        " may (--max_queued_jobs)"));
  }
  const uint64_t sequence = next_sequence_;
  const std::string id = absl::StrCat(
      IdStem(spec.name()), "-", absl::FormatTime("%Y%m%d-%H%M%S", options_.now(), absl::UTCTimeZone()),
      "-", sequence);
  spec.set_job_id(id);
  auto job = std::make_unique<Job>();
  JobRecord& r = job->record;
  r.set_id(id);
  r.set_name(spec.name());
  r.set_owner(owner);
  r.set_state(JobRecord::QUEUED);
  r.set_num_workers(request.workers_size());
  r.set_num_epochs(spec.num_epochs());
  r.set_submit_unix_ms(NowMs());
  r.set_sequence(sequence);
  job->request = std::move(request);
  RETURN_IF_ERROR(store_.Create(job->request, r));  // nothing is queued that is not kept
  ++next_sequence_;
  queue_.push_back(id);
  Job& ref = *job;
  jobs_[id] = std::move(job);
  queue_cv_.SignalAll();
  return Snapshot(ref);
}

std::vector<JobRecord> Coordinator::List(const std::string& owner) const {
  MutexLock lock(&mu_);
  std::vector<JobRecord> records;
  for (const auto& [id, job] : jobs_) {
    if (job->record.owner() == owner) records.push_back(Snapshot(*job));
  }
  std::sort(records.begin(), records.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.sequence() < b.sequence(); });
  return records;
}

absl::StatusOr<JobRecord> Coordinator::Get(const std::string& id, const std::string& owner) const {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, Find(id, owner));
  return Snapshot(*job);
}

absl::StatusOr<JobRecord> Coordinator::Cancel(const std::string& id, const std::string& owner) {
  std::shared_ptr<Cancellation> cancellation;
  JobRecord record;
  {
    MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Job * job, Find(id, owner));
    if (job->record.state() == JobRecord::QUEUED) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), id));
      Finish(*job, absl::CancelledError("cancelled while queued"), {});
    } else if (job->record.state() == JobRecord::RUNNING) {
      job->cancel_requested = true;
      cancellation = cancellation_;
    }
    record = Snapshot(*job);
  }
  // Outside mu_: cancelling calls every worker, and the run reports back to this object.
  if (cancellation != nullptr) cancellation->Cancel();
  return record;
}

absl::StatusOr<std::unique_ptr<Coordinator::Attachment>> Coordinator::Attach(
    const std::string& id, const std::string& owner, JobListener* listener) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, Find(id, owner));
  for (const RankedEvent& event : job->events) listener->OnEvent(event);
  // Batch events are not kept; the latest of each worker says where a running job stands.
  for (const auto& [rank, event] : job->latest_batch) listener->OnEvent(event);
  if (Finished(job->record.state())) {
    listener->OnEnd(Snapshot(*job));
  } else {
    job->listeners.insert(listener);
  }
  return std::unique_ptr<Attachment>(new Attachment(this, listener));
}

void Coordinator::RunLoop() {
  while (true) {
    std::string id;
    SubmitJobRequest request;
    std::shared_ptr<Cancellation> cancellation = std::make_shared<Cancellation>();
    {
      // Taken off the queue and made RUNNING, with its cancellation in place, in one step:
      // neither a Stop nor a Cancel may come between (the job would run on uncancellable, or
      // be looked for in the queue it has left).
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) queue_cv_.Wait(&mu_);
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
      Job& job = *jobs_.at(id);
      job.record.set_state(JobRecord::RUNNING);
      job.record.set_start_unix_ms(NowMs());
      cancellation_ = cancellation;
      request = job.request;
      Save(job);
    }
    RunOne(id, request, cancellation);
  }
}

void Coordinator::RunOne(const std::string& id, const SubmitJobRequest& request,
                         const std::shared_ptr<Cancellation>& cancellation) {
  spdlog::info("jobs: running '{}' on {} worker(s)", id, request.workers_size());
  absl::StatusOr<std::map<std::string, double>> eval = runner_(
      request, [this, &id](int rank, const JobEvent& event) { OnEvent(id, rank, event); },
      cancellation.get());
  MutexLock lock(&mu_);
  cancellation_.reset();
  absl::Status status = eval.status();
  if (stopping_ && !status.ok() && !jobs_.at(id)->cancel_requested) {
    // This worker stops (SIGTERM, a pod evicted): the job stays RUNNING on disk and runs again
    // first when the worker comes back (Open). Its followers' streams end with the server.
    Job& job = *jobs_.at(id);
    job.record.set_message(absl::StrCat(
        "the coordinating worker stopped while the job ran; it runs again when the worker "
        "comes back (", status.ToString(), ")"));
    Save(job);
    for (JobListener* listener : job.listeners) listener->OnEnd(Snapshot(job));
    job.listeners.clear();
    spdlog::info("jobs: '{}' left to run again at the next start", id);
    return;
  }
  if (cancellation->cancelled() && !status.ok()) {
    // The workers stop at different batches after a cancel, and one whose round failed
    // because another stopped first may report first: the job was cancelled.
    status = absl::CancelledError(absl::StrCat("cancelled; then ", status.ToString()));
  }
  Finish(*jobs_.at(id), status, eval.ok() ? *eval : std::map<std::string, double>{});
  spdlog::info("jobs: '{}' ended: {}", id, status.ToString());
  DropOldFinished();
}

void Coordinator::OnEvent(const std::string& id, int rank, const JobEvent& event) {
  MutexLock lock(&mu_);
  Job& job = *jobs_.at(id);
  JobRecord& r = job.record;
  if (event.has_worker_replaced()) {
    r.set_worker_replacements(r.worker_replacements() + 1);
    Save(job);
  }
  if (rank == 0) {
    if (event.has_restarted()) {
      r.set_restarts(event.restarted().attempt());
      r.set_run_id(event.restarted().job_id());
    }
    if (event.has_started()) r.set_batches_per_epoch(event.started().batches_per_epoch());
    if (event.has_batch()) {
      r.set_epoch(event.batch().epoch());
      r.set_batch(event.batch().batch());
      r.set_samples_per_second(event.batch().samples_per_second());
    }
    if (event.has_epoch()) {
      r.set_epoch(event.epoch().epoch() + 1);
      r.set_batch(0);
      r.set_samples_per_second(event.epoch().samples_per_second());
    }
  }
  RankedEvent ranked;
  ranked.set_rank(rank);
  *ranked.mutable_event() = event;
  if (event.has_batch()) {
    job.latest_batch[rank] = ranked;
  } else {
    if (event.has_epoch()) job.latest_batch.erase(rank);
    job.events.push_back(ranked);
    if (absl::Status appended = store_.AppendEvent(id, ranked); !appended.ok()) {
      spdlog::warn("jobs: an event of '{}' is not kept: {}", id, appended.ToString());
    }
    if (rank == 0 && event.has_epoch()) Save(job);
  }
  for (JobListener* listener : job.listeners) listener->OnEvent(ranked);
}

void Coordinator::Finish(Job& job, const absl::Status& status,
                         const std::map<std::string, double>& eval) {
  JobRecord& r = job.record;
  r.set_state(status.ok()                 ? JobRecord::SUCCEEDED
              : absl::IsCancelled(status) ? JobRecord::CANCELLED
                                          : JobRecord::FAILED);
  r.set_code(static_cast<int>(status.code()));
  r.set_message(std::string(status.message()));
  r.set_end_unix_ms(NowMs());
  r.mutable_eval()->clear();
  r.mutable_eval()->insert(eval.begin(), eval.end());
  Save(job);
  const JobRecord snapshot = Snapshot(job);
  for (JobListener* listener : job.listeners) listener->OnEnd(snapshot);
  job.listeners.clear();
}

absl::StatusOr<Coordinator::Job*> Coordinator::Find(const std::string& id, const std::string& owner) const {
  RETURN_IF_ERROR(CheckId(id));
  auto it = jobs_.find(id);
  // Another owner's job is as absent as one that never was: its id tells nothing.
  if (it == jobs_.end() || it->second->record.owner() != owner) {
    return absl::NotFoundError(absl::StrCat("no job '", id, "' on this cluster"));
  }
  return it->second.get();
}

JobRecord Coordinator::Snapshot(const Job& job) const {
  JobRecord r = job.record;
  if (r.state() == JobRecord::QUEUED) {
    const auto at = std::find(queue_.begin(), queue_.end(), r.id());
    r.set_queue_position(static_cast<int>(at - queue_.begin()) + 1);
  }
  return r;
}

void Coordinator::Save(const Job& job) {
  if (absl::Status saved = store_.SaveRecord(job.record); !saved.ok()) {
    spdlog::warn("jobs: the record of '{}' is not kept: {}", job.record.id(), saved.ToString());
  }
}

void Coordinator::DropOldFinished() {
  std::vector<std::pair<uint64_t, std::string>> finished;
  for (const auto& [id, job] : jobs_) {
    if (Finished(job->record.state())) finished.emplace_back(job->record.sequence(), id);
  }
  std::sort(finished.begin(), finished.end());
  for (size_t i = 0; i + options_.max_finished < finished.size(); ++i) {
    const std::string& id = finished[i].second;
    if (absl::Status removed = store_.Remove(id); !removed.ok()) {
      spdlog::warn("jobs: {}", removed.ToString());
    }
    jobs_.erase(id);
  }
}

}  // namespace tessera::jobs
