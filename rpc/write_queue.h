// WriteQueue: the messages a gRPC stream has yet to write, highest priority first and, within
// a priority, in the order they were queued - so a small urgent message (the first layer's
// gradient or value, which the next forward pass needs first) overtakes the queued chunks of
// a large one (ByteScheduler's priority scheduling; a stream writes one message at a time).
//
// Not thread-safe: the stream's reactor holds its lock around every call.
#ifndef TESSERA_RPC_WRITE_QUEUE_H_
#define TESSERA_RPC_WRITE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace tessera::rpc {

template <typename Message>
class WriteQueue {
 public:
  void Push(Message message, int priority) {
    // Keyed (-priority, seq): the map's first entry is the next to write.
    queue_.emplace(std::pair{-static_cast<int64_t>(priority), next_seq_++}, std::move(message));
  }
  // After everything queued now and later, whatever its priority (a stream's last message:
  // "this worker leaves").
  void PushLast(Message message) { queue_.emplace(std::pair{kLast, next_seq_++}, std::move(message)); }

  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  // The next message to write, out of the queue (the queue must not be empty).
  Message Pop() {
    auto first = queue_.begin();
    Message message = std::move(first->second);
    queue_.erase(first);
    return message;
  }
  void Clear() { queue_.clear(); }

 private:
  static constexpr int64_t kLast = INT64_MAX;  // beyond -INT_MIN
  uint64_t next_seq_ = 0;
  std::map<std::pair<int64_t, uint64_t>, Message> queue_;
};

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_WRITE_QUEUE_H_
