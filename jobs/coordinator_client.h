// CoordinatorClient: the client's side of the Jobs service (proto/jobs.proto), spoken to the
// coordinating worker of a cluster (the first of its workers): submit a job, list jobs,
// follow one, cancel one. What `tessera submit|jobs|attach|wait|cancel` call.
//
// Errors are about the call, named with the coordinator's address: NOT_FOUND for an unknown
// id, RESOURCE_EXHAUSTED for a full queue, UNAVAILABLE for a lost connection. A job's own
// outcome is its final JobRecord (state, code, message), never a call's error.
//
// Thread safety: Detach may be called from any thread (a signal handler's thread) while
// Attach runs; the other methods from one thread at a time.
#ifndef TESSERA_JOBS_COORDINATOR_CLIENT_H_
#define TESSERA_JOBS_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/jobs.grpc.pb.h"
#include "rpc/transport_security.h"

namespace tessera::jobs {

class CoordinatorClient {
 public:
  // Waits up to `timeout` for `address` to accept a connection.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, const rpc::TransportSecurity& security, absl::Duration timeout);

  absl::StatusOr<JobRecord> Submit(const SubmitJobRequest& request);
  absl::StatusOr<std::vector<JobRecord>> List();
  absl::StatusOr<JobRecord> Cancel(const std::string& id);
  // Follows job `id`: `on_event` gets its events from the start, then live; returns its final
  // record once it has ended. CANCELLED after Detach.
  absl::StatusOr<JobRecord> Attach(const std::string& id,
                                   const std::function<void(const RankedEvent&)>& on_event);
  // Stops following (Attach returns CANCELLED); the job goes on.
  void Detach();

 private:
  CoordinatorClient(std::string address, std::unique_ptr<Jobs::Stub> stub)
      : address_(std::move(address)), stub_(std::move(stub)) {}
  std::string Peer() const { return "coordinator (worker 0, " + address_ + ")"; }

  const std::string address_;
  std::unique_ptr<Jobs::Stub> stub_;
  std::mutex mu_;
  grpc::ClientContext* attached_ = nullptr;  // the running Attach's (mu_)
  bool detached_ = false;                    // Detach came (mu_)
};

// A JobRecord's state as a word ("queued", "running", ...).
std::string StateName(JobRecord::State state);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_COORDINATOR_CLIENT_H_
