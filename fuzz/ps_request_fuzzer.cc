// Fuzz target: a parameter server's request handling (kvstore/server_store.h), through its
// public API only: a fresh dist ServerStore of 2 workers per input, a Session per worker, and
// the bytes as a sequence of records
//
//   uint8 to     0: worker 0's stream, 1: worker 1's stream, 2: the command channel
//   uint16 len   little-endian; a short last record takes what is left
//   len bytes    a serialized WorkerMessage (to 0, 1) or CommandRequest (to 2)
//
// fed in order to Session::Handle / Command; then both streams close. The bounds are small
// (4 MiB arrays, 8 MiB staged per stream, 16 MiB of shared memory) so a fuzzed shape cannot
// ask for gigabytes. Keys of 64 bytes or more get shared-memory slots, so pushes and pulls
// through them are fuzzed too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_runtime.h"
#include "kvstore/server_store.h"
#include "proto/kvstore.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  kvstore::ServerStoreOptions options;
  options.num_workers = 2;
  options.max_chunk_bytes = 64 << 10;
  options.max_array_bytes = 4 << 20;
  options.max_session_staged_bytes = 8 << 20;
  options.max_session_staged_requests = 64;
  options.round_timeout = absl::Milliseconds(200);
  options.shared_memory = true;
  options.shared_memory_min_bytes = 64;
  options.max_shared_memory_bytes = 16 << 20;
  kvstore::ServerStore store(fuzz::FuzzRuntime(), options);
  std::unique_ptr<kvstore::ServerStore::Session> sessions[2];
  for (auto& session : sessions) {
    // Replies are dropped: the target looks for crashes, hangs and sanitizer reports.
    session = store.Open([](std::vector<ServerMessage> replies) {});
  }
  size_t pos = 0;
  while (pos + 3 <= size) {
    const int to = data[pos] % 3;
    const size_t len = std::min<size_t>(data[pos + 1] | (data[pos + 2] << 8), size - pos - 3);
    const uint8_t* payload = data + pos + 3;
    pos += 3 + len;
    if (to < 2) {
      WorkerMessage message;
      if (message.ParseFromArray(payload, static_cast<int>(len))) {
        sessions[to]->Handle(std::move(message));
      }
    } else {
      CommandRequest command;
      if (command.ParseFromArray(payload, static_cast<int>(len))) {
        (void)store.Command(command);
      }
    }
  }
  for (auto& session : sessions) session->Close(absl::UnavailableError("fuzz input ended"));
  return 0;
}
