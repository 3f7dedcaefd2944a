// PrefetchingIter: wraps any DataIter and fetches its next batch on a background thread
// while the caller computes on the current one (MXNet's PrefetcherIter, one batch ahead).
//
// The batches, their order and any error are exactly the wrapped iterator's: Next()
// hands over what the background Next() produced, and the fetch of the batch after it
// starts at once. Reset() waits for a fetch in flight, discards it, resets the wrapped
// iterator and starts fetching the new epoch's first batch. This relies on DataIter's
// contract that a batch's arrays are never rewritten by later batches.
//
// Ownership: owns the wrapped iterator. It is used by one thread at a time, handed over
// under a mutex: the background thread while a fetch is in flight, else Reset() on the
// caller's thread (provide_* are read once, up front). Thread safety: the PrefetchingIter
// itself is used by one thread at a time, as any DataIter.
#ifndef TESSERA_IO_PREFETCHING_ITER_H_
#define TESSERA_IO_PREFETCHING_ITER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/data_iter.h"

namespace tessera::io {

class PrefetchingIter final : public DataIter {
 public:
  explicit PrefetchingIter(std::unique_ptr<DataIter> inner);
  ~PrefetchingIter() override;  // waits for a fetch in flight
  PrefetchingIter(const PrefetchingIter&) = delete;
  PrefetchingIter& operator=(const PrefetchingIter&) = delete;

  absl::Status Reset() override;
  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }
  std::vector<DataDesc> provide_data() const override { return provide_data_; }
  std::vector<DataDesc> provide_label() const override { return provide_label_; }
  int batch_size() const override { return batch_size_; }

 private:
  // One background step: the wrapped iterator's Next() and, if true, its Value().
  struct Fetched {
    absl::StatusOr<bool> more = false;
    DataBatch batch;
  };

  void Loop();
  // Hands a fetch to the background thread (idle: nothing in flight) and returns at once.
  void StartFetch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the fetch in flight and takes its result.
  Fetched AwaitFetch(std::unique_lock<std::mutex>& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<DataIter> inner_;
  const std::vector<DataDesc> provide_data_, provide_label_;
  const int batch_size_;
  DataBatch batch_;  // the caller's current batch; only the caller's thread touches it

  // std::mutex, not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer, which
  // then cannot see absl::Mutex's synchronization (these tests run under TSan).
  std::mutex mu_;
  std::condition_variable work_cv_;              // requested_ or stop_ became true
  std::condition_variable done_cv_;              // result_ was set
  bool requested_ ABSL_GUARDED_BY(mu_) = false;  // a fetch the thread has not begun
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;  // a fetch begun and not yet awaited
  std::optional<Fetched> result_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after every member above is ready
};

}  // namespace tessera::io

#endif  // TESSERA_IO_PREFETCHING_ITER_H_
