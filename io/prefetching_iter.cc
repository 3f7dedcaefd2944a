#include "io/prefetching_iter.h"

#include <utility>

namespace tessera::io {

PrefetchingIter::PrefetchingIter(std::unique_ptr<DataIter> inner)
    : inner_(std::move(inner)),
      provide_data_(inner_->provide_data()),
      provide_label_(inner_->provide_label()),
      batch_size_(inner_->batch_size()),
      thread_([this] { Loop(); }) {
  std::unique_lock<std::mutex> lock(mu_);
  StartFetch();
}

PrefetchingIter::~PrefetchingIter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void PrefetchingIter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return requested_ || stop_; });
    if (stop_) return;
    requested_ = false;
    // The wrapped iterator is ours until result_ is set; the caller only waits.
    lock.unlock();
    Fetched fetched;
    fetched.more = inner_->Next();
    if (fetched.more.ok() && *fetched.more) fetched.batch = inner_->Value();
    lock.lock();
    result_ = std::move(fetched);
    done_cv_.notify_one();
  }
}

void PrefetchingIter::StartFetch() {
  requested_ = true;
  in_flight_ = true;
  work_cv_.notify_one();
}

PrefetchingIter::Fetched PrefetchingIter::AwaitFetch(std::unique_lock<std::mutex>& lock) {
  done_cv_.wait(lock, [this] { return result_.has_value(); });
  Fetched fetched = std::move(*result_);
  result_.reset();
  in_flight_ = false;
  return fetched;
}

absl::StatusOr<bool> PrefetchingIter::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  // Nothing in flight after the end of an epoch or an error: fetch now, synchronously.
  if (!in_flight_) StartFetch();
  Fetched fetched = AwaitFetch(lock);
  if (fetched.more.ok() && *fetched.more) {
    batch_ = std::move(fetched.batch);
    StartFetch();  // one batch ahead
  }
  return fetched.more;
}

absl::Status PrefetchingIter::Reset() {
  std::unique_lock<std::mutex> lock(mu_);
  if (in_flight_) AwaitFetch(lock);  // a batch of the old epoch: discarded
  batch_ = DataBatch();
  // The thread is idle (nothing requested), so the wrapped iterator is ours here.
  absl::Status status = inner_->Reset();
  if (status.ok()) StartFetch();
  return status;
}

}  // namespace tessera::io
