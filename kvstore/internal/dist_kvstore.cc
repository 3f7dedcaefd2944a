// DistKVStore: dist_kvstore.h's contract.
#include "kvstore/dist_kvstore.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/mutex.h"
#include "core/shared_memory.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "kvstore/internal/comm.h"
#include "kvstore/internal/compression.h"
#include "kvstore/internal/server_connection.h"
#include "kvstore/internal/server_route.h"
#include "kvstore/key_slices.h"
#include "kvstore/kvstore_metrics.h"
#include "kvstore/transport.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore {
namespace internal {
namespace {

// Counts a request's outstanding parts and reports the first failure once all are in.
class Completion {
 public:
  Completion(int parts, std::function<void(absl::Status)> done)
      : remaining_(parts), done_(std::move(done)) {}
  void PartDone(const absl::Status& status) {
    absl::Status first;
    {
      MutexLock lock(&mu_);
      if (!status.ok() && status_.ok()) status_ = status;
      if (--remaining_ > 0) return;
      first = status_;  // the last part: nothing writes status_ any more
    }
    done_(std::move(first));
  }

 private:
  Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::Status)> done_;
};

// Blocks until `n` parts are done; the first failure.
class Waiter {
 public:
  explicit Waiter(int n)
      : completion_(std::make_shared<Completion>(n, [p = promise_](absl::Status s) { p->set_value(s); })) {}
  std::shared_ptr<Completion> completion() const { return completion_; }
  absl::Status Wait() { return promise_->get_future().get(); }

 private:
  std::shared_ptr<std::promise<absl::Status>> promise_ = std::make_shared<std::promise<absl::Status>>();
  std::shared_ptr<Completion> completion_;
};

// One finished push or pull of `bytes`, begun at `start`.
void Record(prometheus::Counter& bytes_total, prometheus::Histogram& seconds, absl::Time start,
            double bytes) {
  bytes_total.Increment(bytes);
  seconds.Observe(absl::ToDoubleSeconds(absl::Now() - start));
}

}  // namespace

class DistKVStore : public KVStore {
 public:
  DistKVStore(std::string type, DistKVStoreOptions options,
              std::vector<std::unique_ptr<ServerRoute>> servers)
      : KVStore(std::move(type)), options_(std::move(options)), servers_(std::move(servers)) {
    for (const auto& server : servers_) {
      rejoin_progress_.push_back(options_.rejoin ? server->hello().progress() : WorkerProgress());
      barriers_to_skip_.push_back(rejoin_progress_.back().barriers());
    }
    placed_elements_.assign(servers_.size(), 0);
    if (options_.cancellation != nullptr) {
      cancelled_ = options_.cancellation->OnCancel([this] {
        for (auto& server : servers_) server->Abort();
      });
    }
  }

  ~DistKVStore() override {
    {
      MutexLock lock(&mu_);
      // Requests a server holds (a round waiting for a lost worker's replacement) end when the
      // cancellation cuts the streams: it stays registered meanwhile.
      for (auto& [id, key] : keys_) {
        (void)key.engine->WaitForVar(key.var);
        (void)key.engine->DeleteVariable(nullptr, Context::CPU(), key.var);
      }
      keys_.clear();
      if (stash_ != nullptr) {
        (void)stash_->engine->WaitForVar(stash_->var);
        (void)stash_->engine->DeleteVariable(nullptr, Context::CPU(), stash_->var);
      }
    }
    cancelled_.reset();  // before the servers go
    servers_.clear();  // closes the streams: this worker leaves on purpose (LeaveRequest)
  }

  absl::Status Init(const std::vector<int>& keys, const std::vector<NDArray>& values) override;
  absl::Status Push(const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& values,
                    int priority) override;
  absl::Status Pull(const std::vector<int>& keys, const std::vector<std::vector<NDArray>>& outs,
                    int priority) override;
  absl::Status PushPull(const std::vector<int>& keys,
                        const std::vector<std::vector<NDArray>>& values,
                        const std::vector<std::vector<NDArray>>& outs, int priority) override;
  void SetUpdater(Updater updater) override {
    MutexLock lock(&mu_);
    updater_ = std::move(updater);
    optimizer_.reset();
  }
  absl::Status SetOptimizer(std::unique_ptr<Optimizer> optimizer) override;
  Optimizer* optimizer() override {
    MutexLock lock(&mu_);
    return optimizer_.get();
  }
  absl::StatusOr<std::string> SaveOptimizerStates() override;
  absl::Status LoadOptimizerStates(const Runtime& rt, const std::string& bytes) override;
  absl::StatusOr<std::vector<KeyCounters>> RoundCounters() override;
  absl::Status Barrier() override;
  bool rejoining() const override { return options_.rejoin; }
  absl::Status StashWorkerState(const std::vector<NDArray>& arrays) override;
  absl::Status RestoreWorkerState(const std::vector<NDArray>& arrays) override;
  absl::StatusOr<RejoinPoint> Rejoin(const std::vector<int>& keys, int setup_barriers) override;
  int rank() const override { return options_.cluster.index; }
  int num_workers() const override { return options_.cluster.num_workers(); }

 private:
  struct Part {
    int server = 0;
    int64_t begin = 0;  // elements
    int64_t size = 0;
    int server_key = 0;  // what the server calls the part: the key, or its slice's number
    // This worker's slot for the part in its server's shared memory; null where the server
    // does not share the key or this process cannot map it (the part travels on the stream).
    std::shared_ptr<const SharedMemory> slot;
    // This worker's pushes of the part so far (ArrayChunk.seq numbers them, so that a server
    // applies a push sent again once). Sent from engine functions that the key's variable
    // orders; shared, as Part is copied into them.
    std::shared_ptr<std::atomic<uint64_t>> pushes = std::make_shared<std::atomic<uint64_t>>(0);
    // Gradient compression's error feedback: what the part's pushes have not sent yet
    // (two_bit.h). Touched by engine functions that the key's variable orders.
    std::shared_ptr<std::vector<float>> residual;
  };
  struct Key {
    Shape shape;
    std::vector<Part> parts;
    engine::Engine* engine = nullptr;  // not owned: the runtime of the Init value
    engine::VarHandle var;             // orders this worker's pushes and pulls of the key
    NDArray merged;                    // host sum of several devices' pushes
    NDArray received;                  // host copy of a pull for several or device outputs
    std::map<int, NDArray> staged;     // host copies of device arrays being pushed
    // A replacement's first pull of the key asks for what its predecessor pulled after this
    // push number (PullRequest.after_push).
    std::optional<uint64_t> pull_after_push;
  };

  absl::Status Check(const char* what, const std::vector<int>& keys,
                     const std::vector<std::vector<NDArray>>& arrays);
  // Where the parts of keys[i] (sizes[i] elements) live: a big key's slices spread evenly
  // (key_slices.h), then each small key, largest first (ties: lower key), on the server
  // holding the fewest elements so far, so the servers carry the same bytes, not the same
  // number of keys. The same Init calls place alike on every worker. INVALID_ARGUMENT when a
  // key's slices would need more key numbers than the servers' int32 keys hold.
  absl::StatusOr<std::vector<std::vector<Part>>> Place(const std::vector<int>& keys,
                                                       const std::vector<int64_t>& sizes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps this worker's slot of every part of `keys` whose server shares it (MapKeyRequest).
  void MapSlots(const std::vector<int>& keys, std::vector<std::vector<Part>>& placed);
  enum class ChunkKind { kInit, kPush, kPushPull, kStash };
  // Sends `part` of the key's `data` (named part.server_key) as chunks of `kind` whose
  // payloads point into `data` (kept alive by `owner`), or, for a push into a part with a
  // slot, copies it there and sends the header; `on_reply` hears the replies.
  // A request sent again after a failover goes on the stream (the server that took the
  // part over shares no memory) with the same push number.
  // `packed` (compressing): the part's values compressed (Compress), sent instead, on the
  // stream.
  void SendPart(const Shape& shape, const Part& part, const char* data, ChunkKind kind,
                std::shared_ptr<const void> owner, int priority,
                ServerConnection::OnReply on_reply,
                std::shared_ptr<const std::string> packed = nullptr) const;
  // Sends one message (a pull, barrier or map_key; its id set on sending) to `server`'s route.
  void SendMessage(int server, WorkerMessage message, int priority,
                   ServerConnection::OnReply on_reply) const;
  // The host array a push of `arrays` (one key's, one per device) sends: the one array as it
  // is, or this worker's devices copied to the host and summed (engine pushes at
  // `priority`).
  absl::StatusOr<NDArray> PushSource(Key& key, const std::vector<NDArray>& arrays, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reply handler of a pull (or push-pull) of key `k`'s `part`, which copies the value's
  // chunks (or the part's slot) to `base` and reports the part to `done`.
  static ServerConnection::OnReply PullInto(char* base, const Part& part, int k,
                                            std::shared_ptr<Completion> done);
  // The completion of one push, pull or push-pull of `parts` parts: records the metrics
  // (pushed and pulled bytes) and any UNAVAILABLE, then tells the engine.
  std::shared_ptr<Completion> EngineCompletion(size_t parts, double push_bytes, double pull_bytes,
                                               engine::CallbackOnComplete on_complete);
  // Whether every server of the job takes push-pull requests (HelloReply).
  bool ServersPushPull() const;
  bool compressing() const { return !options_.compression.type().empty(); }
  // The payload bytes a push (compressed or not) and a pull (bfloat16 or float32) of `parts`
  // carry, as the servers count them (tessera_kvstore_push_bytes_total and pull_bytes).
  double SentBytes(const std::vector<Part>& parts) const {
    double bytes = 0;
    for (const Part& p : parts) {
      bytes += compressing() ? static_cast<double>(CompressedBytes(options_.compression, p.size))
                             : static_cast<double>(p.size) * sizeof(float);
    }
    return bytes;
  }
  double ReceivedBytes(const std::vector<Part>& parts) const {
    double elements = 0;
    for (const Part& p : parts) elements += static_cast<double>(p.size);
    return elements * (PullsInBFloat16(options_.compression) ? 2 : sizeof(float));
  }
  // The part's values at `data` (the key's), compressed with its residual (compression.h).
  std::shared_ptr<std::string> Compress(const Part& part, const char* data) const;
  // Keeps the first UNAVAILABLE seen: the job cannot go on without that server or worker.
  void NoteFailure(const absl::Status& status) {
    if (status.code() != absl::StatusCode::kUnavailable) return;
    MutexLock lock(&broken_mu_);
    if (broken_.ok()) broken_ = status;
  }
  absl::Status broken() {
    MutexLock lock(&broken_mu_);
    return broken_;
  }
  absl::Status CommandAll(const CommandRequest& request, std::vector<CommandReply>* replies);

  const DistKVStoreOptions options_;
  std::vector<std::unique_ptr<ServerRoute>> servers_;  // by server index
  Mutex mu_;  // not absl::Mutex, for TSan (see optimizer.h)
  std::map<int, Key> keys_ ABSL_GUARDED_BY(mu_);
  Updater updater_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  Mutex broken_mu_;
  absl::Status broken_ ABSL_GUARDED_BY(broken_mu_);
  // Per server: how far a replacement's predecessor got there (its first HelloReply).
  std::vector<WorkerProgress> rejoin_progress_;
  // Per server: the elements of the key parts placed there so far (Place).
  std::vector<int64_t> placed_elements_ ABSL_GUARDED_BY(mu_);
  // Per server: the barriers a replacement's predecessor passed there, which its Barrier
  // calls skip (one server may have opened one more than another when it was lost).
  std::vector<uint64_t> barriers_to_skip_ ABSL_GUARDED_BY(mu_);
  // The worker state stashed with server index 0 (StashWorkerState): gathered into `host`,
  // then sent as a request numbered like a key's pushes (part.pushes counts the batches);
  // `var` orders the sends, and the pushes issued after one wait for it.
  struct Stash {
    Part part;
    engine::Engine* engine = nullptr;
    engine::VarHandle var;
    NDArray host;                   // float32, every array's elements in turn
    std::map<size_t, NDArray> staged;  // host copies of device arrays, by position
  };
  std::unique_ptr<Stash> stash_ ABSL_GUARDED_BY(mu_);  // null until the first stash
  // A replacement's predecessor's batches (Rejoin): where its stashes continue.
  uint64_t rejoined_batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<Cancellation::Registration> cancelled_;  // aborts servers_
  std::once_flag unmappable_;  // warned that a server's shared memory cannot be mapped here
};

absl::StatusOr<std::vector<std::vector<DistKVStore::Part>>> DistKVStore::Place(
    const std::vector<int>& keys, const std::vector<int64_t>& sizes) {
  const int64_t n = static_cast<int64_t>(servers_.size());
  std::vector<std::vector<Part>> placed(keys.size());
  std::vector<int64_t> load = placed_elements_;  // kept only if every key can be placed
  std::vector<size_t> small;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int key = keys[i];
    const int64_t size = sizes[i];
    if (size < options_.bigarray_bound) {
      small.push_back(i);
      continue;
    }
    // Slices of at most the bound, a multiple of n of them (key_slices.h).
    const int64_t per_server =
        (size + n * options_.bigarray_bound - 1) / (n * options_.bigarray_bound);
    if (per_server - 1 > (INT32_MAX - key) / kSliceKeyStride) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Init of key ", key, ": its ", size, " elements make ", per_server,
          " slices per server of at most ", options_.bigarray_bound,
          " elements, more than the servers' key numbers hold (raise the big-array bound)"));
    }
    const int64_t slices = n * per_server;
    for (int64_t j = 0; j < slices; ++j) {
      const int64_t begin = size * j / slices, end = size * (j + 1) / slices;
      if (end == begin) continue;
      placed[i].push_back(Part{.server = static_cast<int>(j % n), .begin = begin,
                               .size = end - begin,
                               .server_key = key + static_cast<int>(j / n) * kSliceKeyStride});
      load[j % n] += end - begin;
    }
  }
  std::stable_sort(small.begin(), small.end(), [&](size_t a, size_t b) {
    return sizes[a] != sizes[b] ? sizes[a] > sizes[b] : keys[a] < keys[b];
  });
  for (size_t i : small) {
    const auto least = std::min_element(load.begin(), load.end());
    const int server = static_cast<int>(least - load.begin());
    placed[i].push_back(Part{.server = server, .size = sizes[i], .server_key = keys[i]});
    *least += sizes[i];
  }
  placed_elements_ = std::move(load);
  return placed;
}

std::shared_ptr<std::string> DistKVStore::Compress(const Part& part, const char* data) const {
  auto packed = std::make_shared<std::string>(
      internal::CompressedBytes(options_.compression, part.size), '\0');
  internal::CompressPush(options_.compression, reinterpret_cast<const float*>(data) + part.begin,
                         part.residual->data(), part.size, packed->data());
  return packed;
}

void DistKVStore::SendPart(const Shape& shape, const Part& part, const char* data, ChunkKind kind,
                           std::shared_ptr<const void> owner, int priority,
                           ServerConnection::OnReply on_reply,
                           std::shared_ptr<const std::string> packed) const {
  const uint64_t total =
      packed != nullptr ? packed->size() : static_cast<uint64_t>(part.size) * sizeof(float);
  // What every chunk of the request repeats: the key, its dtype and the part's shape.
  ArrayChunk header;
  header.set_key(part.server_key);
  header.set_dtype(DT_FLOAT32);
  if (part.size == shape.Size()) {
    for (int64_t d : shape.dims()) header.add_shape(d);
  } else {
    header.add_shape(part.size);  // a slice of a big array: 1-D on its server
  }
  if (kind != ChunkKind::kInit) header.set_seq(++*part.pushes);  // once: a resend keeps it
  const char* bytes = data + part.begin * sizeof(float);
  if (packed != nullptr) {  // never shared: MapSlots maps no slot for a compressing worker
    header.set_compressed(true);
    bytes = packed->data();
    owner = packed;
  }
  auto issue = [kind, header = std::move(header), slot = part.slot, bytes, total,
                owner = std::move(owner), priority](ServerConnection& conn, bool moved,
                                                    ServerConnection::OnReply reply) {
    auto body = [kind](WorkerMessage& m) {
      return kind == ChunkKind::kInit   ? m.mutable_init()
             : kind == ChunkKind::kPush ? m.mutable_push()
             : kind == ChunkKind::kStash ? m.mutable_stash()
                                        : m.mutable_push_pull();
    };
    if (slot != nullptr && kind != ChunkKind::kInit && !moved) {
      std::memcpy(slot->data(), bytes, total);
      WorkerMessage m;
      ArrayChunk* chunk = body(m);
      *chunk = header;
      chunk->set_last(true);
      chunk->set_in_shared_memory(true);
      conn.Send({std::move(m)}, priority, std::move(reply));
      return;
    }
    const uint64_t step = std::min<uint64_t>(kChunkBytes, conn.hello().max_chunk_bytes());
    std::vector<WorkerMessage> messages;
    std::vector<std::pair<const char*, size_t>> payloads;
    uint64_t offset = 0;
    do {
      const uint64_t n = std::min(step, total - offset);
      WorkerMessage& m = messages.emplace_back();
      ArrayChunk* chunk = body(m);
      *chunk = header;
      chunk->set_offset(offset);
      payloads.emplace_back(bytes + offset, n);
      offset += n;
      chunk->set_last(offset == total);
    } while (offset < total);
    conn.SendChunks(std::move(messages), std::move(payloads), owner, priority, std::move(reply));
  };
  servers_[part.server]->Send(std::move(issue), std::move(on_reply));
}

void DistKVStore::SendMessage(int server, WorkerMessage message, int priority,
                              ServerConnection::OnReply on_reply) const {
  servers_[server]->Send(
      [message = std::move(message), priority](ServerConnection& conn, bool moved,
                                               ServerConnection::OnReply reply) {
        WorkerMessage m = message;
        // The server that took a part over shares no memory: its value comes on the stream.
        if (moved && m.has_pull()) m.mutable_pull()->set_into_shared_memory(false);
        conn.Send({std::move(m)}, priority, std::move(reply));
      },
      std::move(on_reply));
}

ServerConnection::OnReply DistKVStore::PullInto(char* base, const Part& part, int k,
                                                std::shared_ptr<Completion> done) {
  const uint64_t bytes = static_cast<uint64_t>(part.size) * sizeof(float);
  return [base, bytes, slot = part.slot, k, done = std::move(done)](const ServerMessage& reply,
                                                                    bool last) {
    absl::Status status = ReplyStatus(reply);
    if (status.ok() && !reply.has_pull()) {
      status = absl::DataLossError(
          absl::StrCat("pull of key ", k, ": the server answered without the value"));
    } else if (status.ok() && reply.pull().in_shared_memory()) {
      if (slot == nullptr || !last) {
        status = absl::DataLossError(absl::StrCat(
            "pull of key ", k, ": the server answered in shared memory this worker did not map"));
      } else {
        std::memcpy(base, slot->data(), bytes);
      }
    } else if (status.ok()) {
      const ArrayChunk& c = reply.pull();
      // A compressed pull (GradientCompression.pull_type) comes as bfloat16, whole values
      // per chunk: its offsets count in those.
      const bool bf16 = c.dtype() == DT_BFLOAT16;
      const uint64_t width = bf16 ? sizeof(BFloat16) : sizeof(float);
      const uint64_t sent = bytes / sizeof(float) * width;
      if ((c.dtype() != DT_FLOAT32 && !bf16) || c.offset() % width != 0 || c.data().size() % width != 0 ||
          c.offset() > sent || c.data().size() > sent - c.offset() ||
          (last && c.offset() + c.data().size() != sent)) {
        status = absl::DataLossError(absl::StrCat(
            "pull of key ", k, ": the server sent bytes [", c.offset(), ", ", c.offset() + c.data().size(),
            ") of ", DataType_Name(c.dtype()), " values of a ", bytes / sizeof(float), "-value part"));
      } else if (bf16) {
        internal::UnpackPull(c.data().data(), static_cast<int64_t>(c.data().size() / width),
                             reinterpret_cast<float*>(base) + c.offset() / width);
      } else {
        std::memcpy(base + c.offset(), c.data().data(), c.data().size());
      }
    }
    if (last) done->PartDone(status);
  };
}

std::shared_ptr<Completion> DistKVStore::EngineCompletion(size_t parts, double push_bytes,
                                                          double pull_bytes,
                                                          engine::CallbackOnComplete on_complete) {
  return std::make_shared<Completion>(
      static_cast<int>(parts),
      [this, on_complete, start = absl::Now(), push_bytes, pull_bytes](absl::Status status) {
        if (status.ok()) {
          ClientMetrics& metrics = KVStoreClientMetrics();
          if (push_bytes > 0) Record(metrics.push_bytes, metrics.push_seconds, start, push_bytes);
          if (pull_bytes > 0) Record(metrics.pull_bytes, metrics.pull_seconds, start, pull_bytes);
        }
        NoteFailure(status);
        on_complete(std::move(status));
      });
}

bool DistKVStore::ServersPushPull() const {
  return std::all_of(servers_.begin(), servers_.end(),
                     [](const auto& s) { return s->hello().serves_push_pull(); });
}

absl::Status DistKVStore::Check(const char* what, const std::vector<int>& keys,
                                const std::vector<std::vector<NDArray>>& arrays) {
  if (keys.size() != arrays.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", keys.size(), " keys but ",
                                                   arrays.size(), " array lists"));
  }
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = keys_.find(keys[i]);
    if (it == keys_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " of key ", keys[i], ": the key is not initialized"));
    }
    if (arrays[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " of key ", keys[i], ": no arrays"));
    }
    for (const NDArray& a : arrays[i]) {
      if (a.is_none() || a.dtype() != DType::kFloat32 || a.shape() != it->second.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " of key ", keys[i], ": array ",
            a.is_none() ? "none" : absl::StrCat(DTypeName(a.dtype()), " ", a.shape().ToString()),
            " does not match the key's float32 ", it->second.shape.ToString()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::Init(const std::vector<int>& keys, const std::vector<NDArray>& values) {
  RETURN_IF_ERROR(broken());
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: ", keys.size(), " keys but ", values.size(), " values"));
  }
  // Shared: gRPC may hold the payload slices a little past the replies.
  auto hosts = std::make_shared<std::vector<std::vector<float>>>();
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] < 0 || keys[i] >= kSliceKeyStride) {
        // The servers name parts by non-negative int32 keys, and the numbers from the
        // stride up name big keys' slices (key_slices.h).
        return absl::InvalidArgumentError(absl::StrCat(
            "Init: key ", keys[i], " is out of the dist stores' range [0, ", kSliceKeyStride,
            ") (numbers above it name the slices of big keys on the servers)"));
      }
      if (keys_.count(keys[i]) || std::count(keys.begin(), keys.begin() + i, keys[i])) {
        return absl::InvalidArgumentError(absl::StrCat("Init: key ", keys[i], " initialized twice"));
      }
      if (values[i].is_none() || values[i].dtype() != DType::kFloat32) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Init of key ", keys[i], ": the parameter servers hold float32 arrays, got ",
            values[i].is_none() ? "none" : DTypeName(values[i].dtype())));
      }
    }
  }
  for (const NDArray& v : values) {
    ASSIGN_OR_RETURN(std::vector<float> host, v.AsVector<float>());
    hosts->push_back(std::move(host));
  }
  std::vector<std::vector<Part>> placed;
  {
    std::vector<int64_t> sizes;
    for (const NDArray& v : values) sizes.push_back(v.Size());
    MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(placed, Place(keys, sizes));
  }
  int requests = 0;
  for (std::vector<Part>& parts : placed) {
    requests += static_cast<int>(parts.size());
    if (compressing()) {
      for (Part& part : parts) {
        part.residual = std::make_shared<std::vector<float>>(part.size, 0.0f);
      }
    }
  }
  Waiter waiter(requests);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (const Part& part : placed[i]) {
      SendPart(values[i].shape(), part, reinterpret_cast<const char*>((*hosts)[i].data()),
               ChunkKind::kInit, hosts, 0,
               [done = waiter.completion()](const ServerMessage& reply, bool) {
                 done->PartDone(ReplyStatus(reply));
               });
    }
  }
  absl::Status status = waiter.Wait();
  NoteFailure(status);
  RETURN_IF_ERROR(status);
  MapSlots(keys, placed);
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    Key key;
    key.shape = values[i].shape();
    key.parts = std::move(placed[i]);
    key.engine = values[i].runtime().engine;
    key.var = key.engine->NewVariable();
    const Runtime& rt = values[i].runtime();
    ASSIGN_OR_RETURN(key.merged, NDArray::Empty(rt, key.shape));
    // Pulls into GPU (or several) arrays land here first: pinned, so the copies to the
    // devices are DMA transfers (plain host memory where there is no GPU).
    ASSIGN_OR_RETURN(key.received, NDArray::Empty(rt, key.shape, Context::CPUPinned(0)));
    keys_.emplace(keys[i], std::move(key));
  }
  return absl::OkStatus();
}

absl::StatusOr<KVStore::RejoinPoint> DistKVStore::Rejoin(const std::vector<int>& keys,
                                                         int setup_barriers) {
  if (!options_.rejoin) return KVStore::Rejoin(keys, setup_barriers);
  RejoinPoint point;
  point.barriers = INT64_MAX;
  for (const WorkerProgress& progress : rejoin_progress_) {
    point.barriers = std::min<int64_t>(point.barriers, progress.barriers());
  }
  // The predecessor pushed every key once per batch, in order: each part has taken its
  // pushes of the batches done, and at most one more (it was lost pushing the next batch).
  auto taken = [this](const Part& part) -> uint64_t {
    const auto& pushes = rejoin_progress_[part.server].pushes();
    const auto it = pushes.find(part.server_key);
    return it == pushes.end() ? 0 : it->second;
  };
  MutexLock lock(&mu_);
  uint64_t done = UINT64_MAX, most = 0;
  for (int k : keys) {
    const auto it = keys_.find(k);
    if (it == keys_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("Rejoin: key ", k, " is not initialized"));
    }
    for (const Part& part : it->second.parts) {
      done = std::min(done, taken(part));
      most = std::max(most, taken(part));
    }
  }
  if (keys.empty()) done = 0;
  for (size_t s = 0; s < rejoin_progress_.size(); ++s) {
    std::vector<std::string> counts;
    for (const auto& [key, pushes] : rejoin_progress_[s].pushes()) {
      counts.push_back(absl::StrCat(key, ":", pushes));
    }
    spdlog::info("worker {} rejoins: server index {} took its pushes {}", rank(), s,
                 absl::StrJoin(counts, " "));
  }
  if (most > done + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", rank(), " cannot rejoin: the servers took between ", done, " and ", most,
        " of its predecessor's pushes per key, more than one batch apart"));
  }
  for (int k : keys) {
    Key& key = keys_.at(k);
    for (Part& part : key.parts) part.pushes->store(done);
    key.pull_after_push = done;
  }
  point.pushes = static_cast<int64_t>(done);
  rejoined_batches_ = done;
  // The finished epochs' barriers are not called again: skipped are the setup's still to
  // come, and the one a server passed beyond the others.
  const uint64_t epochs = static_cast<uint64_t>(std::max<int64_t>(0, point.barriers - setup_barriers));
  for (uint64_t& skip : barriers_to_skip_) skip -= std::min(skip, epochs);
  spdlog::info("worker {} rejoins its job after {} barriers and {} batches", rank(),
               point.barriers, point.pushes);
  return point;
}

void DistKVStore::MapSlots(const std::vector<int>& keys, std::vector<std::vector<Part>>& placed) {
  if (compressing()) return;  // compressed pushes travel on the stream
  std::vector<std::pair<int, Part*>> asked;  // server key, part
  for (size_t i = 0; i < keys.size(); ++i) {
    for (Part& part : placed[i]) {
      const uint64_t min_bytes = servers_[part.server]->hello().shared_memory_min_bytes();
      if (min_bytes > 0 && static_cast<uint64_t>(part.size) * sizeof(float) >= min_bytes) {
        asked.emplace_back(part.server_key, &part);
      }
    }
  }
  if (asked.empty()) return;
  // Each reply handler fills its own entry; the waiter orders them before the reads below.
  std::vector<absl::StatusOr<SharedMemory>> mapped;
  for (size_t a = 0; a < asked.size(); ++a) mapped.emplace_back(absl::UnknownError("no reply"));
  Waiter waiter(static_cast<int>(asked.size()));
  for (size_t a = 0; a < asked.size(); ++a) {
    const Part& part = *asked[a].second;
    WorkerMessage m;
    m.mutable_map_key()->set_key(asked[a].first);
    SendMessage(
        part.server, std::move(m), 0,
        [&mapped, a, bytes = static_cast<uint64_t>(part.size) * sizeof(float),
         done = waiter.completion()](const ServerMessage& reply, bool) {
          absl::Status status = ReplyStatus(reply);
          if (status.ok() && reply.slot().size() != bytes) {
            status = absl::DataLossError(absl::StrCat("the server's slot holds ",
                                                      reply.slot().size(), " bytes, not ", bytes));
          }
          mapped[a] = status.ok() ? SharedMemory::Open(reply.slot().path(), reply.slot().offset(),
                                                       reply.slot().size())
                                  : absl::StatusOr<SharedMemory>(status);
          done->PartDone(absl::OkStatus());
        });
  }
  (void)waiter.Wait();
  for (size_t a = 0; a < asked.size(); ++a) {
    if (mapped[a].ok()) {
      asked[a].second->slot = std::make_shared<const SharedMemory>(std::move(*mapped[a]));
    } else if (mapped[a].status().code() != absl::StatusCode::kFailedPrecondition) {
      std::call_once(unmappable_, [&] {
        spdlog::warn(
            "server {} shares keys through memory, but this worker cannot map them ({}): "
            "they travel on the stream",
            servers_[asked[a].second->server]->address(), mapped[a].status().ToString());
      });
    }
  }
}

// The functions that send a request queue it on the server's stream (ordered there by
// `priority`), after at most a copy into a shared-memory slot or the compression of the
// push: on the engine's prioritized queue, so they are not held behind the backward pass's
// compute when the caller's priorities are below it (MXNet's -index).
constexpr engine::FnProperty kSend = engine::FnProperty::kCPUPrioritized;

absl::StatusOr<NDArray> DistKVStore::PushSource(Key& key, const std::vector<NDArray>& arrays,
                                                int priority) {
  if (arrays.size() == 1 && OnHost(arrays[0])) return arrays[0];
  std::vector<NDArray> host;
  for (size_t d = 0; d < arrays.size(); ++d) {
    if (OnHost(arrays[d])) {
      host.push_back(arrays[d]);
      continue;
    }
    NDArray& stage = key.staged[static_cast<int>(d)];
    if (stage.is_none()) {
      // Pinned: the device-to-host copy is a DMA transfer on the copy stream, pushed at
      // the key's priority, so it overlaps the rest of the backward pass.
      ASSIGN_OR_RETURN(stage,
                       NDArray::Empty(arrays[d].runtime(), key.shape, Context::CPUPinned(0)));
    }
    RETURN_IF_ERROR(Copy(arrays[d], stage, priority));
    host.push_back(stage);
  }
  RETURN_IF_ERROR(SumInto(host, key.merged, priority));
  return key.merged;
}

// Repeated keys grouped, as the local stores do: their arrays are summed together. The keys
// in first-seen order.
static std::vector<int> GroupByKey(const std::vector<int>& keys,
                                   const std::vector<std::vector<NDArray>>& values,
                                   std::map<int, std::vector<NDArray>>* grouped) {
  std::vector<int> order;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!grouped->count(keys[i])) order.push_back(keys[i]);
    auto& list = (*grouped)[keys[i]];
    list.insert(list.end(), values[i].begin(), values[i].end());
  }
  return order;
}

absl::Status DistKVStore::Push(const std::vector<int>& keys,
                               const std::vector<std::vector<NDArray>>& values, int priority) {
  RETURN_IF_ERROR(broken());
  RETURN_IF_ERROR(Check("push", keys, values));
  std::map<int, std::vector<NDArray>> grouped;
  const std::vector<int> order = GroupByKey(keys, values, &grouped);
  MutexLock lock(&mu_);
  if (updater_) {
    return absl::UnimplementedError(
        "push: a custom updater cannot run on the parameter servers (use SetOptimizer)");
  }
  for (int k : order) {
    Key& key = keys_.at(k);
    ASSIGN_OR_RETURN(const NDArray source, PushSource(key, grouped[k], priority));
    auto send = [this, k, shape = key.shape, parts = key.parts, source, priority](
                    engine::RunContext, engine::CallbackOnComplete on_complete) {
      std::shared_ptr<Completion> done = EngineCompletion(
          parts.size(), SentBytes(parts), 0, on_complete);
      // The payload is the array's own memory: the engine keeps it unchanged until this
      // push completes (the servers' replies), and `owner` keeps it allocated while gRPC
      // may still hold it.
      const char* data = static_cast<const char*>(source.data().dptr);
      auto owner = std::make_shared<NDArray>(source);
      for (const Part& part : parts) {
        SendPart(shape, part, data, ChunkKind::kPush, owner, priority,
                 [done](const ServerMessage& reply, bool) { done->PartDone(ReplyStatus(reply)); },
                 compressing() ? Compress(part, data) : nullptr);
      }
    };
    std::vector<engine::VarHandle> read = {source.var()};
    if (stash_ != nullptr) read.push_back(stash_->var);  // the state of its batch is held first
    RETURN_IF_ERROR(key.engine->PushAsync(send, Context::CPU(), read, {key.var}, kSend, priority,
                                          "kvstore_push"));
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::Pull(const std::vector<int>& keys,
                               const std::vector<std::vector<NDArray>>& outs, int priority) {
  RETURN_IF_ERROR(broken());
  RETURN_IF_ERROR(Check("pull", keys, outs));
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    Key& key = keys_.at(keys[i]);
    const int k = keys[i];
    // One host output is filled directly; otherwise through the key's host buffer.
    const bool direct = outs[i].size() == 1 && OnHost(outs[i][0]);
    const NDArray target = direct ? outs[i][0] : key.received;
    auto fetch = [this, k, parts = key.parts, target, priority,
                  after_push = std::exchange(key.pull_after_push, std::nullopt)](
                     engine::RunContext, engine::CallbackOnComplete on_complete) {
      std::shared_ptr<Completion> done = EngineCompletion(
          parts.size(), 0, ReceivedBytes(parts), on_complete);
      char* data = static_cast<char*>(target.data().dptr);
      for (const Part& part : parts) {
        WorkerMessage m;
        m.mutable_pull()->set_key(part.server_key);
        m.mutable_pull()->set_into_shared_memory(part.slot != nullptr);
        if (after_push.has_value()) m.mutable_pull()->set_after_push(*after_push);
        SendMessage(part.server, std::move(m), priority,
                    PullInto(data + part.begin * sizeof(float), part, k, done));
      }
    };
    std::vector<engine::VarHandle> mutated = {key.var, target.var()};
    RETURN_IF_ERROR(key.engine->PushAsync(fetch, Context::CPU(), {}, mutated, kSend, priority,
                                          "kvstore_pull"));
    if (!direct) {
      for (const NDArray& out : outs[i]) RETURN_IF_ERROR(Copy(key.received, out, priority));
    }
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::PushPull(const std::vector<int>& keys,
                                   const std::vector<std::vector<NDArray>>& values,
                                   const std::vector<std::vector<NDArray>>& outs, int priority) {
  RETURN_IF_ERROR(broken());
  RETURN_IF_ERROR(Check("push", keys, values));
  RETURN_IF_ERROR(Check("pull", keys, outs));
  std::map<int, std::vector<NDArray>> grouped;
  const std::vector<int> order = GroupByKey(keys, values, &grouped);
  // One request per key and server needs servers that take it, and a key pushed once (a
  // repeated key's pulls come after its one summed push).
  if (!ServersPushPull() || order.size() != keys.size()) {
    RETURN_IF_ERROR(Push(keys, values, priority));
    return Pull(keys, outs, priority);
  }
  MutexLock lock(&mu_);
  if (updater_) {
    return absl::UnimplementedError(
        "pushpull: a custom updater cannot run on the parameter servers (use SetOptimizer)");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const int k = keys[i];
    Key& key = keys_.at(k);
    ASSIGN_OR_RETURN(const NDArray source, PushSource(key, grouped[k], priority));
    const bool direct = outs[i].size() == 1 && OnHost(outs[i][0]);
    const NDArray target = direct ? outs[i][0] : key.received;
    auto exchange = [this, k, shape = key.shape, parts = key.parts, source, target, priority](
                        engine::RunContext, engine::CallbackOnComplete on_complete) {
      std::shared_ptr<Completion> done =
          EngineCompletion(parts.size(), SentBytes(parts), ReceivedBytes(parts), on_complete);
      // The value may land where the payload came from (a pushpull in place): a server
      // answers only once it has received the whole push.
      const char* data = static_cast<const char*>(source.data().dptr);
      char* out = static_cast<char*>(target.data().dptr);
      auto owner = std::make_shared<NDArray>(source);
      for (const Part& part : parts) {
        // Compressed before the value lands where the payload came from (a pushpull in place).
        SendPart(shape, part, data, ChunkKind::kPushPull, owner, priority,
                 PullInto(out + part.begin * sizeof(float), part, k, done),
                 compressing() ? Compress(part, data) : nullptr);
      }
    };
    std::vector<engine::VarHandle> read;
    if (source.var() != target.var()) read.push_back(source.var());
    if (stash_ != nullptr) read.push_back(stash_->var);  // the state of its batch is held first
    RETURN_IF_ERROR(key.engine->PushAsync(exchange, Context::CPU(), read, {key.var, target.var()},
                                          kSend, priority, "kvstore_pushpull"));
    if (!direct) {
      for (const NDArray& out : outs[i]) RETURN_IF_ERROR(Copy(key.received, out, priority));
    }
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::Barrier() {
  {
    MutexLock lock(&mu_);
    for (auto& [k, key] : keys_) RETURN_IF_ERROR(key.engine->WaitForVar(key.var));
  }
  RETURN_IF_ERROR(broken());
  std::vector<int> servers;  // where this barrier is still to be passed
  {
    MutexLock lock(&mu_);
    for (int s = 0; s < static_cast<int>(servers_.size()); ++s) {
      if (barriers_to_skip_[s] > 0) {
        --barriers_to_skip_[s];
      } else {
        servers.push_back(s);
      }
    }
  }
  if (servers.empty()) return absl::OkStatus();
  Waiter waiter(static_cast<int>(servers.size()));
  for (int s : servers) {
    WorkerMessage m;
    m.mutable_barrier();
    SendMessage(s, std::move(m), 0,
                [c = waiter.completion(), route = servers_[s].get()](const ServerMessage& reply,
                                                                     bool) {
                  if (reply.code() == 0) route->PassedBarrier();
                  c->PartDone(ReplyStatus(reply));
                });
  }
  absl::Status status = waiter.Wait();
  NoteFailure(status);
  return status;
}

absl::Status DistKVStore::CommandAll(const CommandRequest& request,
                                     std::vector<CommandReply>* replies) {
  CommandRequest ours = request;
  ours.set_job_id(options_.job_id);
  for (auto& server : servers_) {
    ASSIGN_OR_RETURN(CommandReply reply, server->Command(ours, absl::Seconds(60)));
    if (replies != nullptr) replies->push_back(std::move(reply));
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::SetOptimizer(std::unique_ptr<Optimizer> optimizer) {
  if (optimizer == nullptr) return absl::InvalidArgumentError("SetOptimizer: null optimizer");
  CommandRequest request;
  OptimizerSpec* spec = request.mutable_set_optimizer();
  spec->set_name(optimizer->name());
  for (const auto& [name, value] : optimizer->params()) (*spec->mutable_params())[name] = value;
  for (const auto& [index, mult] : optimizer->lr_mult()) (*spec->mutable_lr_mult())[index] = mult;
  for (const auto& [index, mult] : optimizer->wd_mult()) (*spec->mutable_wd_mult())[index] = mult;
  if (const LRScheduler* scheduler = optimizer->lr_scheduler()) {
    spec->set_lr_scheduler(scheduler->name());
    for (const auto& [name, value] : scheduler->config()) (*spec->mutable_lr_scheduler_params())[name] = value;
  }
  RETURN_IF_ERROR(CommandAll(request, nullptr));
  MutexLock lock(&mu_);
  updater_ = nullptr;
  optimizer_ = std::move(optimizer);
  return absl::OkStatus();
}

// Every server's state: "TSRPSOPT", uint32 count, then per server uint64 length + bytes.
absl::StatusOr<std::string> DistKVStore::SaveOptimizerStates() {
  CommandRequest request;
  request.set_save_optimizer_state(true);
  std::vector<CommandReply> replies;
  RETURN_IF_ERROR(CommandAll(request, &replies));
  std::string out = "TSRPSOPT";
  const uint32_t n = static_cast<uint32_t>(replies.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  for (const CommandReply& r : replies) {
    const uint64_t len = r.state().size();
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out.append(r.state());
  }
  return out;
}

absl::StatusOr<std::vector<KeyCounters>> DistKVStore::RoundCounters() {
  CommandRequest request;
  request.set_round_counters(true);
  std::vector<CommandReply> replies;
  RETURN_IF_ERROR(CommandAll(request, &replies));
  std::vector<KeyCounters> counters;
  for (CommandReply& reply : replies) {
    for (KeyCounters& c : *reply.mutable_counters()) counters.push_back(std::move(c));
  }
  return counters;
}

absl::Status DistKVStore::StashWorkerState(const std::vector<NDArray>& arrays) {
  if (!options_.replace_workers || arrays.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(broken());
  int64_t total = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker state to stash: array ", i, " is ", DTypeName(arrays[i].dtype()),
          "; the stashed state is float32"));
    }
    total += arrays[i].Size();
  }
  MutexLock lock(&mu_);
  if (stash_ == nullptr) {
    stash_ = std::make_unique<Stash>();
    Stash& stash = *stash_;
    stash.part = Part{0, 0, total};
    stash.part.pushes->store(rejoined_batches_);
    stash.engine = arrays[0].runtime().engine;
    stash.var = stash.engine->NewVariable();
    ASSIGN_OR_RETURN(stash.host, NDArray::Empty(arrays[0].runtime(), Shape{total}, Context::CPU()));
  }
  Stash& stash = *stash_;
  if (stash.part.size != total) {
    return absl::InvalidArgumentError(absl::StrCat("worker state to stash: ", total,
                                                   " floats, but its first stash had ",
                                                   stash.part.size));
  }
  std::vector<NDArray> sources;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (OnHost(arrays[i])) {
      sources.push_back(arrays[i]);
      continue;
    }
    NDArray& stage = stash.staged[i];
    if (stage.is_none()) {
      ASSIGN_OR_RETURN(stage, NDArray::Empty(arrays[i].runtime(), arrays[i].shape(),
                                             Context::CPUPinned(0)));
    }
    RETURN_IF_ERROR(Copy(arrays[i], stage, 0));
    sources.push_back(stage);
  }
  // Gathered at once, so the next forward pass that writes the arrays waits only for a copy.
  std::vector<engine::VarHandle> read;
  for (const NDArray& s : sources) read.push_back(s.var());
  auto gather = [sources, host = stash.host](engine::RunContext,
                                             engine::CallbackOnComplete on_complete) {
    char* out = static_cast<char*>(host.data().dptr);
    for (const NDArray& s : sources) {
      const size_t bytes = static_cast<size_t>(s.Size()) * sizeof(float);
      std::memcpy(out, s.data().dptr, bytes);
      out += bytes;
    }
    on_complete();
  };
  RETURN_IF_ERROR(stash.engine->PushAsync(gather, Context::CPU(), read, {stash.host.var()},
                                          engine::FnProperty::kNormal, 0, "kvstore_stash_gather"));
  auto send = [this, part = stash.part, host = stash.host](engine::RunContext,
                                                          engine::CallbackOnComplete on_complete) {
    std::shared_ptr<Completion> done = EngineCompletion(
        1, 0, 0, on_complete);  // not a push: the traffic metrics leave it out
    SendPart(Shape{part.size}, part, static_cast<const char*>(host.data().dptr),
             ChunkKind::kStash, std::make_shared<NDArray>(host), 0,
             [done](const ServerMessage& reply, bool) { done->PartDone(ReplyStatus(reply)); });
  };
  return stash.engine->PushAsync(send, Context::CPU(), {stash.host.var()}, {stash.var},
                                 engine::FnProperty::kNormal, 0, "kvstore_stash");
}

absl::Status DistKVStore::RestoreWorkerState(const std::vector<NDArray>& arrays) {
  if (!options_.rejoin) return KVStore::RestoreWorkerState(arrays);
  uint64_t batch = 0;
  {
    MutexLock lock(&mu_);
    batch = rejoined_batches_;
  }
  int64_t total = 0;
  for (const NDArray& a : arrays) total += a.Size();
  // Answered as a pull of a part of `total` floats (PullInto checks the chunks).
  std::vector<float> state(static_cast<size_t>(total));
  WorkerMessage message;
  message.mutable_unstash()->set_batch(batch);
  Waiter waiter(1);
  SendMessage(0, std::move(message), 0,
              PullInto(reinterpret_cast<char*>(state.data()), Part{0, 0, total}, 0, waiter.completion()));
  if (absl::Status got = waiter.Wait(); !got.ok()) {
    return absl::Status(got.code(), absl::StrCat("worker ", rank(), "'s predecessor's state after batch ",
                                                 batch, ": ", got.message()));
  }
  const float* in = state.data();
  for (NDArray a : arrays) {  // a handle: the copy fills the caller's array
    RETURN_IF_ERROR(a.SyncCopyFromCPU(in, a.Size()));
    in += a.Size();
  }
  return absl::OkStatus();
}

absl::Status DistKVStore::LoadOptimizerStates(const Runtime&, const std::string& bytes) {
  std::vector<std::string> states;
  size_t at = 8;
  uint32_t n = 0;
  if (bytes.size() < 12 || bytes.compare(0, 8, "TSRPSOPT") != 0) {
    return absl::InvalidArgumentError(
        "LoadOptimizerStates: not a parameter-server optimizer state (no TSRPSOPT header)");
  }
  std::memcpy(&n, bytes.data() + at, sizeof(n));
  at += sizeof(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    if (bytes.size() - at < sizeof(len)) return absl::DataLossError("LoadOptimizerStates: truncated");
    std::memcpy(&len, bytes.data() + at, sizeof(len));
    at += sizeof(len);
    if (bytes.size() - at < len) return absl::DataLossError("LoadOptimizerStates: truncated");
    states.push_back(bytes.substr(at, len));
    at += len;
  }
  if (states.size() != servers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadOptimizerStates: the state holds ",
                                                   states.size(), " servers' states, the job has ",
                                                   servers_.size()));
  }
  for (size_t s = 0; s < servers_.size(); ++s) {
    CommandRequest request;
    request.set_job_id(options_.job_id);
    request.set_load_optimizer_state(states[s]);
    RETURN_IF_ERROR(servers_[s]->Command(request, absl::Seconds(60)).status());
  }
  return absl::OkStatus();
}

// Where a server index's keys are served, and the connection there.
struct IndexServed {
  std::unique_ptr<ServerConnection> conn;
  int server = 0;
  uint64_t view = 0;
};

// A replacement of a lost worker (`hello` says rejoin): the server serving `index`'s keys for
// its job now, in the newest view any server serves them in.
absl::StatusOr<IndexServed> FindIndexToRejoin(int index, Hello hello,
                                              const DistKVStoreOptions& options) {
  // Every server is asked (a dead one within a few seconds): the index may have moved in
  // failovers since the job started, and a stale primary that has not learnt it was replaced
  // serves an older view than the server that replaced it.
  const int n = static_cast<int>(options.cluster.servers.size());
  hello.set_serve_index(index);
  IndexServed best;
  std::vector<std::string> refusals;
  for (int i = 0; i < n; ++i) {
    const int k = (index + i) % n;
    absl::StatusOr<std::unique_ptr<ServerConnection>> conn = ServerConnection::Connect(
        options.cluster.servers[k], hello, std::min(options.connect_timeout, absl::Seconds(5)),
        options.security, options.cancellation);
    if (!conn.ok()) {
      refusals.push_back(std::string(conn.status().message()));
      continue;
    }
    const uint64_t view = (*conn)->hello().view();
    if (best.conn == nullptr || view > best.view) {
      best.conn = *std::move(conn);
      best.server = k;
      best.view = view;
    }
  }
  if (best.conn == nullptr) {
    return absl::UnavailableError(absl::StrCat("worker ", hello.rank(), " cannot rejoin: no server serves index ",
                                               index, "'s keys for job '", hello.job_id(), "' (",
                                               absl::StrJoin(refusals, "; "), ")"));
  }
  spdlog::info("worker {} rejoins: server {} serves index {} in view {}", hello.rank(),
               best.server, index, best.view);
  return best;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<KVStore>> CreateDistKVStore(const std::string& type,
                                                           const DistKVStoreOptions& options) {
  if (type != "dist_sync" && type != "dist_async") {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateDistKVStore: unknown type \"", type, "\" (dist_sync, dist_async)"));
  }
  if (options.cluster.role != Role::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KVStore \"", type, "\" is for workers; this process is ", options.cluster.DebugString()));
  }
  if (options.cluster.servers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("KVStore \"", type, "\": no parameter servers"));
  }
  if (absl::Status st = internal::CheckCompression(options.compression); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("KVStore \"", type, "\": ", st.message()));
  }
  Hello hello;
  hello.set_protocol_version(kKVStoreProtocolVersion);
  hello.set_rank(options.cluster.index);
  hello.set_num_workers(options.cluster.num_workers());
  hello.set_mode(type == "dist_sync" ? SYNC_MODE_SYNC : SYNC_MODE_ASYNC);
  hello.set_job_id(options.job_id);
  hello.set_replace_workers(options.replace_workers);
  hello.set_rejoin(options.rejoin);
  *hello.mutable_compression() = options.compression;
  std::vector<std::unique_ptr<internal::ServerRoute>> servers;
  for (size_t s = 0; s < options.cluster.servers.size(); ++s) {
    internal::IndexServed served;
    if (options.rejoin) {
      ASSIGN_OR_RETURN(served, internal::FindIndexToRejoin(static_cast<int>(s), hello, options));
    } else {
      ASSIGN_OR_RETURN(served.conn, internal::ServerConnection::Connect(
                                        options.cluster.servers[s], hello, options.connect_timeout,
                                        options.security, options.cancellation));
      served.server = static_cast<int>(s);
    }
    servers.push_back(std::make_unique<internal::ServerRoute>(
        internal::ServerRoute::Options{.index = static_cast<int>(s),
                                       .servers = options.cluster.servers,
                                       .hello = hello,
                                       .server = served.server,
                                       .view = served.view,
                                       .barriers = served.conn->hello().progress().barriers(),
                                       .failover_timeout = options.failover_timeout,
                                       .security = options.security,
                                       .cancellation = options.cancellation},
        std::move(served.conn)));
  }
  return std::make_unique<internal::DistKVStore>(type, options, std::move(servers));
}

absl::StatusOr<DistKVStoreOptions> DistKVStoreOptionsFromEnvironment() {
  DistKVStoreOptions options;
  ClusterSpecFlags flags;
  ASSIGN_OR_RETURN(options.cluster, ResolveClusterSpec(flags));
  ASSIGN_OR_RETURN(options.security, rpc::LoadTransportSecurity({}));
  for (const char* name : {"TESSERA_KVSTORE_BIGARRAY_BOUND", "MXNET_KVSTORE_BIGARRAY_BOUND"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    if (!absl::SimpleAtoi(value, &options.bigarray_bound) || options.bigarray_bound < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", value, "' is not a positive number of elements"));
    }
    break;
  }
  return options;
}

}  // namespace tessera::kvstore
