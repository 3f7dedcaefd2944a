#include "core/cancellation.h"

#include <utility>

namespace tessera {

Cancellation::Registration::~Registration() {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  owner_->callbacks_.erase(id_);
}

void Cancellation::RequestStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_requested_ = true;
}

void Cancellation::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return;
  cancelled_ = stop_requested_ = true;
  for (auto& [id, callback] : callbacks_) callback();
}

bool Cancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_requested_;
}

std::unique_ptr<Cancellation::Registration> Cancellation::OnCancel(
    std::function<void()> on_cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) on_cancel();
  const uint64_t id = next_id_++;
  callbacks_.emplace(id, std::move(on_cancel));
  return std::unique_ptr<Registration>(new Registration(this, id));
}

}  // namespace tessera
