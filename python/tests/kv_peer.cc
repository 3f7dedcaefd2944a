// kv_peer: a C++ rank beside a Python one, for python/tests/test_kv.py. It takes part in a
// job's parameter exchange through the C++ workers' own client (kvstore/dist_kvstore.h), so
// the test checks tessera.kv against it on the same parameter servers:
//
//   kv_peer --servers=127.0.0.1:9000,127.0.0.1:9001 --rank=0 --num_workers=2 --job_id=J
//           --token_file=token --keys=3:5,4:600000 --rounds=2
//
// Every key (a 1-D array of the given number of elements) is initialized to
// init[i] = i % 10, then the workers meet in a barrier. In round t (from 1) rank r pushes
// push[i] = (r + 1) * t * (i % 7 - 3) to every key, waits in a barrier with --barrier, and
// pulls every key. Small integers: float32 holds them and their sums exactly, so the test
// predicts every value. The last round's pulls go to stdout as one JSON object,
// {"3": [...], "4": [...]}; an error goes to stderr, with exit status 1.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "kvstore/dist_kvstore.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "rpc/transport_security.h"

ABSL_FLAG(std::string, servers, "", "comma-separated host:port of every parameter server");
ABSL_FLAG(int, rank, 0, "this worker's rank");
ABSL_FLAG(int, num_workers, 1, "how many workers the job has");
ABSL_FLAG(std::string, job_id, "", "the job's id, the same on every worker");
ABSL_FLAG(std::string, token_file, "", "the cluster token");
ABSL_FLAG(std::string, type, "dist_sync", "dist_sync or dist_async");
ABSL_FLAG(std::string, keys, "", "comma-separated key:elements pairs");
ABSL_FLAG(int, rounds, 1, "push-and-pull rounds");
ABSL_FLAG(bool, barrier, false, "meet the other workers in a barrier between push and pull");
ABSL_FLAG(int64_t, bigarray_bound, tessera::kvstore::kDefaultBigArrayBound,
          "arrays of at least this many elements are split across the servers");

namespace {

using tessera::NDArray;

struct Key {
  int id = 0;
  int64_t size = 0;
};

absl::StatusOr<std::vector<Key>> ParseKeys(const std::string& flag) {
  std::vector<Key> keys;
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> fields = absl::StrSplit(entry, ':');
    Key key;
    if (!absl::SimpleAtoi(fields.first, &key.id) || !absl::SimpleAtoi(fields.second, &key.size) ||
        key.size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--keys: '", entry, "' is not key:elements"));
    }
    keys.push_back(key);
  }
  return keys;
}

absl::StatusOr<NDArray> Fill(const tessera::Runtime& rt, int64_t size,
                             const std::function<float(int64_t)>& value) {
  std::vector<float> values(size);
  for (int64_t i = 0; i < size; ++i) values[i] = value(i);
  return tessera::FromVector<float>(rt, tessera::Shape{size}, values);
}

absl::Status Run() {
  ASSIGN_OR_RETURN(const std::vector<Key> keys, ParseKeys(absl::GetFlag(FLAGS_keys)));
  ASSIGN_OR_RETURN(std::unique_ptr<tessera::OwnedRuntime> owned, tessera::OwnedRuntime::Create());
  const tessera::Runtime& rt = owned->get();
  tessera::kvstore::DistKVStoreOptions options;
  options.cluster.index = absl::GetFlag(FLAGS_rank);
  options.cluster.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
  options.cluster.workers.assign(absl::GetFlag(FLAGS_num_workers), "");
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.bigarray_bound = absl::GetFlag(FLAGS_bigarray_bound);
  ASSIGN_OR_RETURN(options.security, tessera::rpc::LoadTransportSecurity(
                                         {.token_file = absl::GetFlag(FLAGS_token_file)}));
  ASSIGN_OR_RETURN(std::unique_ptr<tessera::kvstore::KVStore> store,
                   tessera::kvstore::CreateDistKVStore(absl::GetFlag(FLAGS_type), options));

  std::vector<int> ids;
  std::vector<NDArray> initial;
  std::vector<std::vector<NDArray>> pulled;
  for (const Key& key : keys) {
    ids.push_back(key.id);
    ASSIGN_OR_RETURN(NDArray value, Fill(rt, key.size, [](int64_t i) { return i % 10; }));
    initial.push_back(value);
    ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(rt, tessera::Shape{key.size}));
    pulled.push_back({out});
  }
  RETURN_IF_ERROR(store->Init(ids, initial));
  RETURN_IF_ERROR(store->Barrier());
  const int rank = options.cluster.index;
  for (int round = 1; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    std::vector<std::vector<NDArray>> pushes;
    for (const Key& key : keys) {
      ASSIGN_OR_RETURN(NDArray push, Fill(rt, key.size, [&](int64_t i) {
                         return static_cast<float>((rank + 1) * round * (i % 7 - 3));
                       }));
      pushes.push_back({push});
    }
    RETURN_IF_ERROR(store->Push(ids, pushes));
    if (absl::GetFlag(FLAGS_barrier)) RETURN_IF_ERROR(store->Barrier());
    RETURN_IF_ERROR(store->Pull(ids, pulled));
    for (const auto& out : pulled) RETURN_IF_ERROR(out[0].WaitToRead());
  }

  std::string json = "{";
  for (size_t k = 0; k < keys.size(); ++k) {
    ASSIGN_OR_RETURN(const std::vector<float> values, pulled[k][0].AsVector<float>());
    absl::StrAppend(&json, k ? ", " : "", "\"", keys[k].id, "\": [");
    for (size_t i = 0; i < values.size(); ++i) absl::StrAppend(&json, i ? ", " : "", values[i]);
    json += "]";
  }
  std::printf("%s}\n", json.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "kv_peer: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
