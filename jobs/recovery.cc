#include "jobs/recovery.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/channel.h"
#include "spdlog/spdlog.h"

namespace tessera::jobs {

absl::StatusOr<JobOutcome> RunWithRecovery(const JobSpec& spec, const JobRun& run,
                                           const std::function<void(const JobEvent&)>& on_restart,
                                           const std::function<bool()>& cancelled) {
  const RecoveryPolicy policy = RecoveryPolicyOf(spec);
  const bool resumable = !spec.checkpoint_prefix().empty();
  JobSpec current = spec;
  for (int restarts = 0;; ++restarts) {
    absl::StatusOr<JobOutcome> outcome = run(current, restarts == 0 ? absl::Seconds(30) : policy.wait);
    if (outcome.ok() || !IsLostProcess(outcome.status()) || (cancelled && cancelled())) {
      return outcome;
    }
    if (restarts >= policy.max_restarts) {
      if (restarts == 0) return outcome;
      return absl::Status(outcome.status().code(),
                          absl::StrCat(outcome.status().message(), " (after ", restarts,
                                       " restart(s), the job's recovery.max_restarts)"));
    }
    // The first run's id names the job; each rerun is a new run for the servers.
    const std::string base = spec.job_id().empty() ? spec.name() : spec.job_id();
    current.set_job_id(absl::StrCat(base, ".r", restarts + 1));
    if (resumable) {
      current.set_resume("auto");
      current.set_version(std::max<uint32_t>(current.version(), 3));
    }
    JobEvent event;
    JobEvent::Restarted* restarted = event.mutable_restarted();
    restarted->set_attempt(restarts + 1);
    restarted->set_reason(outcome.status().ToString());
    restarted->set_resumed(resumable);
    restarted->set_job_id(current.job_id());
    spdlog::warn("job '{}' lost a process ({}); restart {} of {}{}", base,
                 outcome.status().ToString(), restarts + 1, policy.max_restarts,
                 resumable ? ", from its newest checkpoint" : ", from the start (no checkpoints)");
    if (on_restart) on_restart(event);
  }
}

absl::Status WaitForCluster(const Cluster& cluster, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& [kind, addresses] :
       {std::pair<const char*, const std::vector<std::string>*>{"worker", &cluster.workers},
        {"server", &cluster.servers}}) {
    for (size_t i = 0; i < addresses->size(); ++i) {
      ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                       rpc::NewChannel({.target = (*addresses)[i], .security = cluster.security}));
      RETURN_IF_ERROR(rpc::WaitUntilConnected(
          *channel, absl::StrCat(kind, " ", i, " (", (*addresses)[i], ")"),
          std::max(absl::ZeroDuration(), deadline - absl::Now())));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::jobs
