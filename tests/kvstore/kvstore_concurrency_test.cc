// Several threads pushing and pulling at once, for every local type and 1, 2 and 4 threads,
// against a sequential oracle. Values are small integers, so sums are exact in float and any
// interleaving of the shared keys' pushes gives one answer.
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/kvstore.h"
#include "ndarray/arithmetic.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;

constexpr int kPrivateKeys = 3;  // per thread, keys 100 * (thread + 1) + j
constexpr int kSharedKeys = 2;   // keys 0 .. kSharedKeys - 1, pushed by every thread
constexpr int kDevices = 2;      // every push comes from cpu(0) and cpu(1)
constexpr int kOpsPerThread = 60;
constexpr int64_t kSize = 5;

class KVStoreConcurrencyTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

INSTANTIATE_TEST_SUITE_P(TypesAndThreads, KVStoreConcurrencyTest,
                         ::testing::Combine(::testing::Values("local_update_cpu",
                                                              "local_allreduce_cpu",
                                                              "local_allreduce_device"),
                                            ::testing::Values(1, 2, 4)));

std::vector<float> RandomInts(std::mt19937& rng) {
  std::vector<float> v(kSize);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
  return v;
}

TEST_P(KVStoreConcurrencyTest, MatchesASequentialOracle) {
  const auto& [type, threads] = GetParam();
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const Runtime& rt = owned->get();
  auto store = *KVStore::Create(type);
  store->SetUpdater([](int, const NDArray& grad, const NDArray& weight) { return weight += grad; });
  auto arr = [&](const std::vector<float>& v, int device) {
    return *FromVector<float>(rt, Shape{kSize}, v, Context::CPU(device));
  };
  for (int k = 0; k < kSharedKeys; ++k) {
    ASSERT_THAT(store->Init({k}, {arr(std::vector<float>(kSize, static_cast<float>(k)), 0)}),
                IsOk());
  }

  // Each thread's contributions to the shared keys, summed after the join.
  std::vector<std::vector<std::vector<float>>> shared(
      threads, std::vector<std::vector<float>>(kSharedKeys, std::vector<float>(kSize, 0)));
  std::vector<std::string> failures(threads);
  auto worker = [&](int t) {
    std::mt19937 rng(1234 + t);
    auto fail = [&](const std::string& what) {
      if (failures[t].empty()) failures[t] = what;
    };
    // The oracle: what each private key must hold after this thread's own calls.
    std::vector<std::vector<float>> oracle(kPrivateKeys);
    for (int j = 0; j < kPrivateKeys; ++j) {
      oracle[j] = RandomInts(rng);
      if (!store->Init({100 * (t + 1) + j}, {arr(oracle[j], j % kDevices)}).ok()) fail("init");
    }
    for (int op = 0; op < kOpsPerThread; ++op) {
      const int j = static_cast<int>(rng() % kPrivateKeys);
      const int key = 100 * (t + 1) + j;
      const int priority = static_cast<int>(rng() % 3);
      std::vector<NDArray> grads;
      std::vector<float> sum(kSize, 0);
      for (int d = 0; d < kDevices; ++d) {
        const std::vector<float> g = RandomInts(rng);
        for (int64_t i = 0; i < kSize; ++i) sum[i] += g[i];
        grads.push_back(arr(g, d));
      }
      switch (rng() % 4) {
        case 0: {  // push a private key
          if (!store->Push({key}, {grads}, priority).ok()) fail("push");
          for (int64_t i = 0; i < kSize; ++i) oracle[j][i] += sum[i];
          break;
        }
        case 1: {  // push a shared key
          const int s = static_cast<int>(rng() % kSharedKeys);
          if (!store->Push({s}, {grads}, priority).ok()) fail("shared push");
          for (int64_t i = 0; i < kSize; ++i) shared[t][s][i] += sum[i];
          break;
        }
        case 2: {  // pull a private key onto both devices
          std::vector<NDArray> outs = {arr(std::vector<float>(kSize, -1), 0),
                                       arr(std::vector<float>(kSize, -1), 1)};
          if (!store->Pull({key}, {outs}, priority).ok()) fail("pull");
          for (const NDArray& o : outs) {
            if (*o.AsVector<float>() != oracle[j]) fail("pulled value differs from the oracle");
          }
          break;
        }
        default: {  // push and pull in one call, in place
          if (!store->PushPull({key}, {grads}, {grads}, priority).ok()) fail("pushpull");
          for (int64_t i = 0; i < kSize; ++i) oracle[j][i] += sum[i];
          for (const NDArray& o : grads) {
            if (*o.AsVector<float>() != oracle[j]) fail("pushpull value differs from the oracle");
          }
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;

  for (int k = 0; k < kSharedKeys; ++k) {
    std::vector<float> expected(kSize, static_cast<float>(k));
    for (int t = 0; t < threads; ++t) {
      for (int64_t i = 0; i < kSize; ++i) expected[i] += shared[t][k][i];
    }
    NDArray out = arr(std::vector<float>(kSize, 0), 1);
    ASSERT_THAT(store->Pull({k}, {{out}}), IsOk());
    EXPECT_EQ(*out.AsVector<float>(), expected) << "shared key " << k;
  }
}

}  // namespace
}  // namespace tessera::kvstore
