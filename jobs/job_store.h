// JobStore: a coordinator's jobs on disk, so that they survive a restart of the daemon that
// holds them. One folder per job under the store's folder (a worker daemon's is
// RUN_ROOT/jobs):
//
//   ID/request.pb   the SubmitJobRequest, written once
//   ID/record.pb    the JobRecord, replaced at every change of state and at every epoch
//   ID/events.log   the job's events but batch events, appended: a 4-byte little-endian
//                   length, then a RankedEvent
//
// request.pb and record.pb are written atomically (core/file.h); a job folder whose
// record.pb is missing or does not parse (a crash before its first record) is not loaded,
// and a torn last event (a crash mid-append) is dropped.
//
// Thread safety: none; the coordinator serializes its calls.
#ifndef TESSERA_JOBS_JOB_STORE_H_
#define TESSERA_JOBS_JOB_STORE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/jobs.pb.h"

namespace tessera::jobs {

struct StoredJob {
  SubmitJobRequest request;
  JobRecord record;
  std::vector<RankedEvent> events;
};

class JobStore {
 public:
  // Keeps nothing: every call succeeds and LoadAll finds no job.
  JobStore() = default;
  // Jobs under `dir`, created (with its parents) if missing.
  static absl::StatusOr<JobStore> Open(const std::string& dir);

  // Every job with a readable record, in no particular order.
  absl::StatusOr<std::vector<StoredJob>> LoadAll() const;
  absl::Status Create(const SubmitJobRequest& request, const JobRecord& record);
  absl::Status SaveRecord(const JobRecord& record);
  absl::Status AppendEvent(const std::string& id, const RankedEvent& event);
  absl::Status Remove(const std::string& id);

 private:
  explicit JobStore(std::string dir) : dir_(std::move(dir)) {}
  std::string Folder(const std::string& id) const;

  std::string dir_;  // empty: keeps nothing
};

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_JOB_STORE_H_
