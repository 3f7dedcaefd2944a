// Cancellation: one thread asks work running on others to stop, and the parts of that work
// that may be blocked (a stream to a peer, a connection attempt) register how to unblock
// themselves. A worker's job gets one: Cancel sets the flag the training loop checks before
// each batch, and cuts the job's parameter-server streams so a job waiting on a frozen
// server returns at once instead of when keepalive gives up.
//
// Thread safety: every method may be called from any thread.
#ifndef TESSERA_CORE_CANCELLATION_H_
#define TESSERA_CORE_CANCELLATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace tessera {

class Cancellation {
 public:
  // Unregisters its callback when destroyed, waiting for a run of it in progress.
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    friend class Cancellation;
    Registration(Cancellation* owner, uint64_t id) : owner_(owner), id_(id) {}
    Cancellation* const owner_;
    const uint64_t id_;
  };

  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Sets the flag only: work stops where it checks it (a training loop before its next batch).
  void RequestStop();
  // Sets the flag and runs every registered callback once, on this thread: waits are cut.
  // Later calls do nothing.
  void Cancel();
  // After RequestStop or Cancel.
  bool cancelled() const;
  // `on_cancel` runs at Cancel, or at once (on this thread) when that already happened. The
  // registration must not outlive this object.
  [[nodiscard]] std::unique_ptr<Registration> OnCancel(std::function<void()> on_cancel);

 private:
  // Callbacks run under the lock, so that a registration dropped meanwhile waits for them.
  mutable std::mutex mu_;
  bool stop_requested_ = false;
  bool cancelled_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::function<void()>> callbacks_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_CANCELLATION_H_
