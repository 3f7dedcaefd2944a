// A worker's end of a ServerStore session, driven directly (no transport): requests sent
// through Session::Handle, replies collected in order. Shared by the store's tests.
#ifndef TESSERA_TESTS_KVSTORE_STORE_WORKER_H_
#define TESSERA_TESTS_KVSTORE_STORE_WORKER_H_

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/shared_memory.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "kvstore/internal/compression.h"
#include "kvstore/server_store.h"
#include "kvstore/transport.h"

namespace tessera::kvstore {

// One worker's end: its session and the replies the store sent it.
class StoreWorker {
 public:
  // `view`: the store's (ServerStoreOptions::view; a store that took keys over serves in 1).
  // `configure` sets what else the Hello says.
  StoreWorker(ServerStore& store, int rank, int num_workers, SyncMode mode, uint64_t view = 0,
              const std::function<void(Hello&)>& configure = nullptr) {
    session_ = store.Open([this](std::vector<ServerMessage> replies) {
      std::unique_lock<std::mutex> lock(mu_);
      // A held reply keeps the store's thread that sends it inside the store, as long work
      // under the locks that reply is sent under would.
      if (!replies.empty() && replies[0].id() == hold_id_) {
        holding_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return hold_id_ == 0; });
        holding_ = false;
      }
      for (auto& r : replies) inbox_.push_back(std::move(r));
      cv_.notify_all();
    });
    WorkerMessage hello;
    hello.set_id(next_id_++);
    hello.mutable_hello()->set_protocol_version(kKVStoreProtocolVersion);
    hello.mutable_hello()->set_rank(rank);
    hello.mutable_hello()->set_num_workers(num_workers);
    hello.mutable_hello()->set_mode(mode);
    hello.mutable_hello()->set_view(view);
    if (configure) configure(*hello.mutable_hello());
    session_->Handle(hello);
    hello_ = Next().hello();
  }
  const HelloReply& hello() const { return hello_; }

  // Maps this worker's slot of `key` (MapKey); the server's answer.
  absl::Status Map(int key) {
    WorkerMessage m;
    m.set_id(next_id_++);
    m.mutable_map_key()->set_key(key);
    session_->Handle(m);
    const ServerMessage r = Next();
    RETURN_IF_ERROR(ReplyStatus(r));
    ASSIGN_OR_RETURN(SharedMemory slot,
                     SharedMemory::Open(r.slot().path(), r.slot().offset(), r.slot().size()));
    slots_.insert_or_assign(key, std::move(slot));
    return absl::OkStatus();
  }
  // A push (or push-pull) through the key's slot: `values` written there (when mapped), a
  // header on the stream.
  uint64_t SharedPush(int key, const std::vector<float>& values, bool push_pull) {
    if (auto it = slots_.find(key); it != slots_.end()) {
      std::memcpy(it->second.data(), values.data(), values.size() * sizeof(float));
    }
    WorkerMessage m;
    m.set_id(next_id_++);
    ArrayChunk* c = push_pull ? m.mutable_push_pull() : m.mutable_push();
    c->set_key(key);
    c->set_dtype(DT_FLOAT32);
    c->add_shape(static_cast<int64_t>(values.size()));
    c->set_last(true);
    c->set_in_shared_memory(true);
    session_->Handle(m);
    return m.id();
  }
  uint64_t SharedPull(int key) {
    WorkerMessage m;
    m.set_id(next_id_++);
    m.mutable_pull()->set_key(key);
    m.mutable_pull()->set_into_shared_memory(true);
    session_->Handle(m);
    return m.id();
  }

  // Sends `values` as Init or Push in chunks of `chunk` floats; returns the request id.
  uint64_t Send(bool init, int key, const std::vector<float>& values, size_t chunk = 1 << 20) {
    return SendAs(init ? &WorkerMessage::mutable_init : &WorkerMessage::mutable_push, key, values,
                  chunk);
  }
  // The same as a PushPull, answered with the value.
  uint64_t PushPull(int key, const std::vector<float>& values, size_t chunk = 1 << 20) {
    return SendAs(&WorkerMessage::mutable_push_pull, key, values, chunk);
  }
  uint64_t SendAs(ArrayChunk* (WorkerMessage::*body)(), int key, const std::vector<float>& values,
                  size_t chunk, uint64_t seq = 0) {
    const uint64_t id = next_id_++;
    for (size_t at = 0; at < values.size() || at == 0; at += chunk) {
      WorkerMessage m;
      m.set_id(id);
      ArrayChunk* c = (m.*body)();
      c->set_key(key);
      c->set_dtype(DT_FLOAT32);
      c->add_shape(static_cast<int64_t>(values.size()));
      c->set_offset(at * sizeof(float));
      const size_t n = std::min(chunk, values.size() - at);
      c->set_data(values.data() + at, n * sizeof(float));
      c->set_last(at + n >= values.size());
      c->set_seq(seq);
      session_->Handle(m);
      if (values.empty()) break;
    }
    return id;
  }
  // A push (or push-pull) of `values` in one chunk, numbered `seq` (ArrayChunk.seq).
  uint64_t Numbered(int key, const std::vector<float>& values, uint64_t seq, bool push_pull) {
    return SendAs(push_pull ? &WorkerMessage::mutable_push_pull : &WorkerMessage::mutable_push,
                  key, values, 1 << 20, seq);
  }
  // A push of `grad` compressed as `compression` says, with this worker's residual of the
  // key as a DistKVStore keeps it, in one chunk numbered `seq`; returns the request id.
  uint64_t CompressedPush(int key, const std::vector<float>& grad,
                          const GradientCompression& compression, uint64_t seq) {
    const int64_t n = static_cast<int64_t>(grad.size());
    std::vector<float>& residual = residuals_[key];
    residual.resize(grad.size(), 0.f);
    std::string packed(internal::CompressedBytes(compression, n), '\0');
    internal::CompressPush(compression, grad.data(), residual.data(), n, packed.data());
    WorkerMessage m;
    m.set_id(next_id_++);
    ArrayChunk* c = m.mutable_push();
    c->set_key(key);
    c->set_dtype(DT_FLOAT32);
    c->add_shape(n);
    c->set_compressed(true);
    c->set_data(std::move(packed));
    c->set_last(true);
    c->set_seq(seq);
    session_->Handle(m);
    return m.id();
  }
  // One chunk of push request `id` for a key of `total` floats, at float `offset`.
  void PushChunk(uint64_t id, int key, int64_t total, int64_t offset,
                 const std::vector<float>& values, bool last) {
    WorkerMessage m;
    m.set_id(id);
    ArrayChunk* c = m.mutable_push();
    c->set_key(key);
    c->set_dtype(DT_FLOAT32);
    c->add_shape(total);
    c->set_offset(offset * sizeof(float));
    c->set_data(values.data(), values.size() * sizeof(float));
    c->set_last(last);
    session_->Handle(m);
  }
  uint64_t Pull(int key, std::optional<uint64_t> after_push = std::nullopt) {
    WorkerMessage m;
    m.set_id(next_id_++);
    m.mutable_pull()->set_key(key);
    if (after_push.has_value()) m.mutable_pull()->set_after_push(*after_push);
    session_->Handle(m);
    return m.id();
  }
  uint64_t Barrier() {
    WorkerMessage m;
    m.set_id(next_id_++);
    m.mutable_barrier();
    session_->Handle(m);
    return m.id();
  }
  // The next reply (waits up to 10 s).
  ServerMessage Next() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !inbox_.empty(); })) {
      ADD_FAILURE() << "no reply within 10 s";
      return ErrorReply(0, absl::DeadlineExceededError("no reply"));
    }
    ServerMessage r = std::move(inbox_.front());
    inbox_.pop_front();
    return r;
  }
  bool HasReply() {
    std::lock_guard<std::mutex> lock(mu_);
    return !inbox_.empty();
  }
  // Whether `count` replies arrive within `timeout` (they stay in the inbox).
  bool AwaitReplies(size_t count, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return inbox_.size() >= count; });
  }
  // The reply to request `id` will block its sender until Release; WaitUntilHeld returns once
  // it does.
  void HoldReplyTo(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_id_ = id;
  }
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return holding_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_id_ = 0;
    cv_.notify_all();
  }
  uint64_t next_id() const { return next_id_; }
  // A pull's value, from its (possibly several) chunks.
  std::vector<float> PullValue(int key) { return ValueOf(Pull(key)); }
  // The value that answers request `id` (a pull or push-pull), the next replies.
  std::vector<float> ValueOf(uint64_t id) {
    std::map<uint64_t, Answer> answers = Collect({id});
    EXPECT_EQ(answers[id].code, 0) << answers[id].message;
    return answers[id].value;
  }
  // The answers to requests `ids`, from the next replies, however they interleave: a value,
  // or none for an acknowledgement.
  struct Answer {
    int code = 0;
    std::string message;
    std::vector<float> value;
  };
  std::map<uint64_t, Answer> Collect(std::set<uint64_t> ids) {
    std::map<uint64_t, Answer> answers;
    while (!ids.empty()) {
      ServerMessage r = Next();
      if (!ids.count(r.id())) {
        ADD_FAILURE() << "a reply to request " << r.id() << ", which is not awaited";
        break;
      }
      Answer& a = answers[r.id()];
      a.code = r.code();
      a.message = r.message();
      if (r.has_pull() && r.pull().in_shared_memory()) {
        const SharedMemory& slot = slots_.at(r.pull().key());
        a.value.resize(slot.size() / sizeof(float));
        std::memcpy(a.value.data(), slot.data(), slot.size());
      } else if (r.has_pull() && r.pull().dtype() == DT_BFLOAT16) {  // compressed pulls
        const size_t first = r.pull().offset() / 2, n = r.pull().data().size() / 2;
        a.value.resize(first + n);
        internal::UnpackPull(r.pull().data().data(), static_cast<int64_t>(n), a.value.data() + first);
      } else if (r.has_pull()) {
        a.value.resize((r.pull().offset() + r.pull().data().size()) / sizeof(float));
        std::memcpy(reinterpret_cast<char*>(a.value.data()) + r.pull().offset(),
                    r.pull().data().data(), r.pull().data().size());
      }
      if (r.code() != 0 || !r.has_pull() || r.pull().last()) ids.erase(r.id());
    }
    return answers;
  }
  // The stream ends as a lost worker's would (no LeaveRequest).
  void Close() { session_->Close(absl::UnavailableError("test closed it")); }
  // The worker leaves on purpose: LeaveRequest, then the stream ends.
  void Leave() {
    WorkerMessage m;
    m.set_id(next_id_++);
    m.mutable_leave();
    session_->Handle(m);
    Close();
  }
  void Handle(const WorkerMessage& m) { session_->Handle(m); }

 private:
  std::unique_ptr<ServerStore::Session> session_;
  HelloReply hello_;
  std::map<int, SharedMemory> slots_;  // by key: mapped by Map
  std::map<int, std::vector<float>> residuals_;  // by key: CompressedPush's
  uint64_t next_id_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ServerMessage> inbox_;
  uint64_t hold_id_ = 0;  // 0: none (ids start at 1)
  bool holding_ = false;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_TESTS_KVSTORE_STORE_WORKER_H_
