#include "io/prefetching_iter.h"

#include <utility>

#include "core/check.h"

namespace tessera::io {

PrefetchingIter::PrefetchingIter(std::unique_ptr<DataIter> inner, int depth)
    : inner_(std::move(inner)),
      depth_(depth),
      provide_data_(inner_->provide_data()),
      provide_label_(inner_->provide_label()),
      batch_size_(inner_->batch_size()),
      num_batches_(inner_->num_batches()),
      thread_([this] { Loop(); }) {
  TESSERA_CHECK(depth >= 1);
}

PrefetchingIter::~PrefetchingIter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

bool PrefetchingIter::ShouldFetch() const {
  return !paused_ && !ended_ && static_cast<int>(ready_.size()) < depth_;
}

void PrefetchingIter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || ShouldFetch(); });
    if (stop_) return;
    fetching_ = true;
    // The wrapped iterator is ours until fetching_ is cleared; Reset() waits for that.
    lock.unlock();
    Fetched fetched;
    fetched.more = inner_->Next();
    if (fetched.more.ok() && *fetched.more) fetched.batch = inner_->Value();
    lock.lock();
    fetching_ = false;
    ended_ = !fetched.more.ok() || !*fetched.more;
    ready_.push_back(std::move(fetched));
    done_cv_.notify_one();
  }
}

absl::StatusOr<bool> PrefetchingIter::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  // Called again after the end of an epoch or an error: ask the wrapped iterator again,
  // as a caller of it would.
  if (ready_.empty() && !fetching_ && ended_) {
    ended_ = false;
    work_cv_.notify_one();
  }
  done_cv_.wait(lock, [this] { return !ready_.empty(); });
  Fetched fetched = std::move(ready_.front());
  ready_.pop_front();
  work_cv_.notify_one();  // room for one more
  if (fetched.more.ok() && *fetched.more) batch_ = std::move(fetched.batch);
  return fetched.more;
}

absl::Status PrefetchingIter::Reset() {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = true;
  done_cv_.wait(lock, [this] { return !fetching_; });
  ready_.clear();  // batches of the old epoch
  batch_ = DataBatch();
  // The thread is paused between fetches, so the wrapped iterator is ours here.
  absl::Status status = inner_->Reset();
  paused_ = false;
  ended_ = !status.ok();  // a failed Reset: nothing to fetch until the next Reset
  work_cv_.notify_one();
  return status;
}

}  // namespace tessera::io
