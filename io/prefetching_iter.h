// PrefetchingIter: wraps any DataIter and fetches up to `depth` batches ahead on a
// background thread while the caller computes on the current one (MXNet's PrefetcherIter
// with its prefetch_buffer).
//
// The batches, their order and any error are exactly the wrapped iterator's: the thread
// calls the wrapped Next() and queues each result, stopping when `depth` results wait or
// the epoch ended (false or an error); Next() takes the oldest. Reset() stops the thread
// between fetches, discards what is queued (batches of the old epoch), resets the wrapped
// iterator and lets the thread start on the new epoch. This relies on DataIter's contract
// that a batch's arrays are never rewritten by later batches.
//
// Ownership: owns the wrapped iterator. It is used by one thread at a time, handed over
// under a mutex: the background thread while fetching_, else Reset() on the caller's
// thread (provide_*, batch_size and num_batches are read once, up front). Thread safety:
// the PrefetchingIter itself is used by one thread at a time, as any DataIter.
#ifndef TESSERA_IO_PREFETCHING_ITER_H_
#define TESSERA_IO_PREFETCHING_ITER_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/data_iter.h"

namespace tessera::io {

class PrefetchingIter final : public DataIter {
 public:
  // depth >= 1: how many batches may wait ready (MXNet's prefetch_buffer).
  explicit PrefetchingIter(std::unique_ptr<DataIter> inner, int depth = 1);
  ~PrefetchingIter() override;  // waits for a fetch in flight
  PrefetchingIter(const PrefetchingIter&) = delete;
  PrefetchingIter& operator=(const PrefetchingIter&) = delete;

  absl::Status Reset() override;
  absl::StatusOr<bool> Next() override;
  const DataBatch& Value() const override { return batch_; }
  std::vector<DataDesc> provide_data() const override { return provide_data_; }
  std::vector<DataDesc> provide_label() const override { return provide_label_; }
  int batch_size() const override { return batch_size_; }
  int64_t num_batches() const override { return num_batches_; }
  int depth() const { return depth_; }

 private:
  // One background step: the wrapped iterator's Next() and, if true, its Value().
  struct Fetched {
    absl::StatusOr<bool> more = false;
    DataBatch batch;
  };

  void Loop();
  bool ShouldFetch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<DataIter> inner_;
  const int depth_;
  const std::vector<DataDesc> provide_data_, provide_label_;
  const int batch_size_;
  const int64_t num_batches_;
  DataBatch batch_;  // the caller's current batch; only the caller's thread touches it

  // std::mutex, not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer, which
  // then cannot see absl::Mutex's synchronization (these tests run under TSan).
  std::mutex mu_;
  std::condition_variable work_cv_;  // ShouldFetch() or stop_ may have become true
  std::condition_variable done_cv_;  // ready_ grew or fetching_ became false
  std::deque<Fetched> ready_ ABSL_GUARDED_BY(mu_);
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;  // the thread is inside inner_->Next()
  // The last fetch ended the epoch (false or an error): no more until Next() takes it
  // and asks again, or Reset().
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;  // Reset() owns inner_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after every member above is ready
};

}  // namespace tessera::io

#endif  // TESSERA_IO_PREFETCHING_ITER_H_
