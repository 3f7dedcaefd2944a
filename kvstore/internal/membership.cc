#include "kvstore/internal/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::kvstore {
namespace {

const char* ModeName(SyncMode mode) {
  switch (mode) {
    case SYNC_MODE_SYNC: return "dist_sync";
    case SYNC_MODE_ASYNC: return "dist_async";
    default: return "no mode";
  }
}

}  // namespace

Membership::Membership(int server_index, int num_workers)
    : server_index_(server_index),
      connected_(num_workers, 0),
      departed_(num_workers, absl::OkStatus()),
      barrier_(num_workers) {}

int Membership::connected_count() const {
  return static_cast<int>(std::count(connected_.begin(), connected_.end(), 1));
}

void Membership::Adopt(const std::string& job_id, SyncMode mode) {
  job_id_ = job_id;
  mode_ = mode;
}

absl::Status Membership::Admit(const Hello& hello, bool* started) {
  *started = false;
  if (hello.num_workers() != num_workers()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", hello.rank(), " counts ", hello.num_workers(),
                     " workers but server ", server_index_, " serves ", num_workers()));
  }
  if (hello.rank() < 0 || hello.rank() >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", hello.rank(), " is outside [0, ", num_workers(), ")"));
  }
  if (hello.mode() != SYNC_MODE_SYNC && hello.mode() != SYNC_MODE_ASYNC) {
    return absl::InvalidArgumentError("Hello names no mode (dist_sync or dist_async)");
  }
  if (hello.job_id() != job_id_) {
    if (const int connected = connected_count(); connected > 0) {
      // UNAVAILABLE: it passes once those workers leave (a worker says Hello again).
      return absl::UnavailableError(absl::StrCat(
          "server ", server_index_, " serves job '", job_id_, "' (", connected,
          " of its workers connected); job '", hello.job_id(), "' must wait"));
    }
    // A new job: nothing of the last one carries over.
    mode_ = SYNC_MODE_UNSET;
    replaces_workers_ = hello.replace_workers();
    barriers_opened_ = 0;
    std::fill(departed_.begin(), departed_.end(), absl::OkStatus());
    std::fill(barrier_.begin(), barrier_.end(), std::nullopt);
    job_id_ = hello.job_id();
    *started = true;
  }
  if (mode_ != SYNC_MODE_UNSET && hello.mode() != mode_) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", hello.rank(), " asks for ", ModeName(hello.mode()),
                     " but this job runs ", ModeName(mode_)));
  }
  if (connected_[hello.rank()]) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker ", hello.rank(), " is already connected to server ", server_index_));
  }
  mode_ = hello.mode();
  // Every Hello of a job says the same; a store that took the job over (Adopt) learns it here,
  // and the barriers the job passed at the lost server from the workers that passed them.
  replaces_workers_ = replaces_workers_ || hello.replace_workers();
  if (!hello.rejoin()) barriers_opened_ = std::max(barriers_opened_, hello.barriers());
  connected_[hello.rank()] = 1;
  departed_[hello.rank()] = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status Membership::Depart(int rank, absl::string_view why, bool on_purpose) {
  connected_[rank] = 0;
  barrier_[rank].reset();
  if (replaces_workers_ && !on_purpose) return absl::OkStatus();
  departed_[rank] = absl::UnavailableError(
      absl::StrCat("worker ", rank, " left server ", server_index_, " (", why, ")"));
  return departed_[rank];
}

absl::Status Membership::EnterBarrier(int rank, uint64_t id, absl::Time now) {
  for (const absl::Status& why : departed_) {
    if (!why.ok()) {
      return absl::UnavailableError(absl::StrCat("barrier cannot complete: ", why.message()));
    }
  }
  if (barrier_[rank].has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " is already in the barrier"));
  }
  if (!barrier_waiting()) barrier_opened_ = now;
  barrier_[rank] = id;
  return absl::OkStatus();
}

bool Membership::barrier_full() const {
  return std::all_of(barrier_.begin(), barrier_.end(), [](const auto& id) { return id.has_value(); });
}

bool Membership::barrier_waiting() const {
  return std::any_of(barrier_.begin(), barrier_.end(), [](const auto& id) { return id.has_value(); });
}

std::vector<char> Membership::InBarrier() const {
  std::vector<char> in(num_workers(), 0);
  for (int r = 0; r < num_workers(); ++r) in[r] = barrier_[r].has_value();
  return in;
}

bool Membership::BarrierOverdue(absl::Time now, absl::Duration timeout) const {
  return barrier_waiting() && now - barrier_opened_ >= timeout;
}

std::vector<std::pair<int, uint64_t>> Membership::TakeBarrier(bool opened) {
  if (opened) ++barriers_opened_;
  std::vector<std::pair<int, uint64_t>> waiters;
  for (int r = 0; r < num_workers(); ++r) {
    if (barrier_[r].has_value()) waiters.emplace_back(r, *barrier_[r]);
    barrier_[r].reset();
  }
  return waiters;
}

}  // namespace tessera::kvstore
