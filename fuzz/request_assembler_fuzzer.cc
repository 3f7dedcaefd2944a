// Fuzz target: a parameter server's chunk reassembly (kvstore/internal/request_assembler.h)
// on its own, so that the fuzzer spends its time on chunk sequences rather than on the rest
// of the store. The bytes are a sequence of records
//
//   uint8 id     the request id, mod 4: few ids, so chunks continue (or fail to) each other
//   uint8 held   the worker's bytes held elsewhere, in KiB
//   uint16 len   little-endian; a short last record takes what is left
//   len bytes    a serialized ArrayChunk
//
// Invariants: the bytes held never exceed the bound; a whole request has exactly the bytes
// its dtype and shape need, within the array bound, and a header without data.
#include <cstddef>
#include <cstdint>
#include <numeric>

#include "core/dtype.h"
#include "fuzz/require.h"
#include "kvstore/internal/request_assembler.h"
#include "proto/kvstore.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  const kvstore::RequestAssembler::Limits limits = {
      .server_index = 0, .max_array_bytes = 64 << 10, .max_requests = 3, .max_bytes = 256 << 10};
  kvstore::RequestAssembler assembler(limits);
  size_t pos = 0;
  while (pos + 4 <= size) {
    const uint64_t id = data[pos] % 4;
    const uint64_t held = uint64_t{data[pos + 1]} << 10;
    const size_t len = std::min<size_t>(data[pos + 2] | (data[pos + 3] << 8), size - pos - 4);
    const uint8_t* payload = data + pos + 4;
    pos += 4 + len;
    ArrayChunk chunk;
    if (!chunk.ParseFromArray(payload, static_cast<int>(len))) continue;
    const int key = chunk.key();
    absl::StatusOr<std::optional<kvstore::RequestAssembler::Request>> added =
        assembler.Add(id, chunk, held);
    fuzz::Require(assembler.bytes() <= limits.max_bytes, "the bytes held stay within the bound");
    if (!added.ok() || !added->has_value()) continue;
    const kvstore::RequestAssembler::Request& request = **added;
    const uint64_t pieces = std::accumulate(
        request.pieces.begin(), request.pieces.end(), uint64_t{0},
        [](uint64_t n, const std::string& p) { return n + p.size(); });
    uint64_t needed = DTypeSize(static_cast<DType>(request.header.dtype()));
    for (int64_t d : request.header.shape()) needed *= static_cast<uint64_t>(d);
    fuzz::Require(request.header.key() == key, "a whole request is the key of its last chunk");
    fuzz::Require(pieces == request.received && request.received == request.expected,
                  "a whole request has every byte it expects");
    fuzz::Require(request.expected == needed, "a whole request's bytes are its dtype and shape's");
    fuzz::Require(needed <= limits.max_array_bytes, "a whole request is within the array bound");
    fuzz::Require(request.header.data().empty(), "a whole request's header carries no data");
  }
  return 0;
}
