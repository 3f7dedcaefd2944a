// Local KVStores: Init/Push/Pull semantics for every local type, the three types agreeing
// with each other and with a one-device reference on a random multi-key, multi-device
// workload (cpu(0..3) as the devices), and every error leaving the store unchanged.
#include "kvstore/kvstore.h"

#include <random>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Arrays = std::vector<std::vector<NDArray>>;

const std::vector<std::string> kLocalTypes = {"local", "local_update_cpu", "local_allreduce_cpu",
                                              "local_allreduce_device"};

class KVStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    store_ = *KVStore::Create(GetParam());
  }
  const Runtime& rt() const { return owned_->get(); }
  NDArray Arr(std::vector<float> v, int device = 0, Shape shape = {}) {
    if (shape.ndim() == 0) shape = Shape{static_cast<int64_t>(v.size())};
    return *FromVector<float>(rt(), shape, v, Context::CPU(device));
  }
  static std::vector<float> Get(const NDArray& a) { return *a.AsVector<float>(); }
  bool allreduce() const { return GetParam().find("allreduce") != std::string::npos; }
  // Pulls `key` (of `n` elements) onto cpu(0..devices-1).
  std::vector<std::vector<float>> PullAll(int key, int n, int devices) {
    std::vector<NDArray> outs;
    for (int d = 0; d < devices; ++d) outs.push_back(Arr(std::vector<float>(n, -99.f), d));
    EXPECT_THAT(store_->Pull({key}, {outs}), IsOk());
    std::vector<std::vector<float>> values;
    for (const NDArray& o : outs) values.push_back(Get(o));
    return values;
  }

  std::unique_ptr<OwnedRuntime> owned_;  // destroyed last
  std::unique_ptr<KVStore> store_;
};
INSTANTIATE_TEST_SUITE_P(Types, KVStoreTest, ::testing::ValuesIn(kLocalTypes));

TEST(KVStoreCreateTest, TypesAndDistributedOnes) {
  for (const std::string& type : kLocalTypes) {
    auto store = KVStore::Create(type);
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ((*store)->type(), type);
    EXPECT_EQ((*store)->rank(), 0);
    EXPECT_EQ((*store)->num_workers(), 1);
    EXPECT_THAT((*store)->Barrier(), IsOk());
    EXPECT_EQ((*store)->optimizer(), nullptr);
  }
  // MXNet's names for local_allreduce_device.
  for (const char* alias : {"device", "nccl"}) {
    auto store = KVStore::Create(alias);
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ((*store)->type(), alias);
  }
  // The dist stores read their cluster from the environment, which names none here.
  EXPECT_THAT(KVStore::Create("dist_sync"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TESSERA_PS_HOSTS")));
  EXPECT_THAT(KVStore::Create("dist_async"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(KVStore::Create("horovod"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("unknown KVStore type \"horovod\"")));
}

TEST_P(KVStoreTest, InitKeepsACopyAndPullBroadcastsIt) {
  NDArray v = Arr({1, 2, 3}, /*device=*/2);
  ASSERT_THAT(store_->Init({3}, {v}), IsOk());
  const float other[] = {7, 7, 7};
  ASSERT_THAT(v.SyncCopyFromCPU(other, 3), IsOk());  // the store is not aliased to v
  EXPECT_THAT(PullAll(3, 3, 3), Each(ElementsAre(1, 2, 3)));
}

TEST_P(KVStoreTest, PushWithoutUpdaterStoresTheSum) {
  ASSERT_THAT(store_->Init({1}, {Arr({100, 200})}), IsOk());
  ASSERT_THAT(store_->Push({1}, {{Arr({1, 2}, 0), Arr({10, 20}, 1), Arr({100, 200}, 2)}}), IsOk());
  EXPECT_THAT(PullAll(1, 2, 3), Each(ElementsAre(111, 222)));
  // The next sum replaces the value; nothing accumulates.
  ASSERT_THAT(store_->Push({1}, {{Arr({1, 1}, 0), Arr({2, 2}, 1), Arr({3, 3}, 2)}}), IsOk());
  EXPECT_THAT(PullAll(1, 2, 3), Each(ElementsAre(6, 6)));
}

TEST_P(KVStoreTest, UpdaterGetsTheKeyAndTheSumOncePerCopy) {
  std::vector<int> calls;
  store_->SetUpdater([&](int key, const NDArray& grad, const NDArray& weight) -> absl::Status {
    calls.push_back(key);
    ASSIGN_OR_RETURN(NDArray step, grad * 0.5);
    return weight -= step;
  });
  ASSERT_THAT(store_->Init({7}, {Arr({10, 20})}), IsOk());
  ASSERT_THAT(store_->Push({7}, {{Arr({1, 2}, 0), Arr({3, 4}, 1)}}), IsOk());
  EXPECT_THAT(PullAll(7, 2, 2), Each(ElementsAre(8, 17)));
  // local_update_cpu updates its one CPU copy; the allreduce types each device's copy.
  EXPECT_EQ(calls, std::vector<int>(allreduce() ? 2 : 1, 7));
}

TEST_P(KVStoreTest, RepeatedKeysAreSummedTogetherAndAllPulled) {
  ASSERT_THAT(store_->Init({5}, {Arr({0, 0})}), IsOk());
  ASSERT_THAT(store_->Push({5, 5}, {{Arr({1, 2})}, {Arr({3, 4}, 1)}}), IsOk());
  NDArray a = Arr({0, 0}), b = Arr({0, 0}, 1);
  ASSERT_THAT(store_->Pull({5, 5}, {{a}, {b}}), IsOk());
  EXPECT_THAT(Get(a), ElementsAre(4, 6));
  EXPECT_THAT(Get(b), ElementsAre(4, 6));
}

// In-place allreduce: the pushed arrays receive the sum.
TEST_P(KVStoreTest, PushPullInPlace) {
  ASSERT_THAT(store_->Init({0, 1}, {Arr({0}), Arr({0, 0})}), IsOk());
  Arrays values = {{Arr({1}, 0), Arr({2}, 1)}, {Arr({1, 1}, 0), Arr({5, 6}, 1)}};
  ASSERT_THAT(store_->PushPull({0, 1}, values, values, /*priority=*/3), IsOk());
  EXPECT_THAT(Get(values[0][0]), ElementsAre(3));
  EXPECT_THAT(Get(values[0][1]), ElementsAre(3));
  EXPECT_THAT(Get(values[1][1]), ElementsAre(6, 7));
}

// ---- All types vs a one-device reference ----

struct Workload {
  std::vector<Shape> shapes;                                        // key k has shapes[k]
  std::vector<std::vector<float>> init;                             // per key
  std::vector<std::vector<std::vector<std::vector<float>>>> grads;  // [round][key][device]
};

Workload MakeWorkload(uint32_t seed, int devices, int rounds) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Workload w;
  w.shapes = {Shape{3, 4}, Shape{7}, Shape{2, 2, 3}, Shape{1}};
  for (const Shape& s : w.shapes) {
    std::vector<float> v(s.Size());
    for (float& x : v) x = u(rng);
    w.init.push_back(v);
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<std::vector<float>>> round(w.shapes.size());
    for (size_t k = 0; k < w.shapes.size(); ++k) {
      if (r > 0 && rng() % 4 == 0) continue;  // some keys sit some rounds out
      for (int d = 0; d < devices; ++d) {
        std::vector<float> g(w.shapes[k].Size());
        for (float& x : g) x = u(rng);
        round[k].push_back(g);
      }
    }
    w.grads.push_back(round);
  }
  return w;
}

// Runs `w` on `store` with the devices cpu(0..devices-1), or with `presum` on cpu(0) alone
// fed the host sum of the devices' gradients (in device order, as every store sums). Returns
// every key's value pulled onto each device.
std::vector<std::vector<std::vector<float>>> RunWorkload(const Runtime& rt, KVStore& store,
                                                         const Workload& w, int devices,
                                                         bool presum) {
  auto arr = [&](const std::vector<float>& v, const Shape& s, int d) {
    return *FromVector<float>(rt, s, v, Context::CPU(d));
  };
  const int keys = static_cast<int>(w.shapes.size());
  for (int k = 0; k < keys; ++k)
    EXPECT_THAT(store.Init({k}, {arr(w.init[k], w.shapes[k], 0)}), IsOk());
  for (const auto& round : w.grads) {
    for (int k = 0; k < keys; ++k) {
      if (round[k].empty()) continue;
      std::vector<NDArray> values;
      if (presum) {
        std::vector<float> sum = round[k][0];
        for (size_t d = 1; d < round[k].size(); ++d) {
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += round[k][d][i];
        }
        values.push_back(arr(sum, w.shapes[k], 0));
      } else {
        for (int d = 0; d < devices; ++d) values.push_back(arr(round[k][d], w.shapes[k], d));
      }
      EXPECT_THAT(store.Push({k}, {values}, /*priority=*/k), IsOk());
    }
  }
  std::vector<std::vector<std::vector<float>>> out(keys);
  for (int k = 0; k < keys; ++k) {
    std::vector<NDArray> outs;
    for (int d = 0; d < (presum ? 1 : devices); ++d) {
      outs.push_back(arr(std::vector<float>(w.shapes[k].Size(), 0), w.shapes[k], d));
    }
    EXPECT_THAT(store.Pull({k}, {outs}), IsOk());
    for (const NDArray& o : outs) out[k].push_back(*o.AsVector<float>());
  }
  return out;
}

TEST(KVStoreEquivalenceTest, AllTypesMatchAOneDeviceReference) {
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  constexpr int kDevices = 4;
  for (bool use_optimizer : {false, true}) {
    for (uint32_t seed : {1u, 2u}) {
      SCOPED_TRACE(::testing::Message() << (use_optimizer ? "sgd" : "updater") << " seed " << seed);
      const Workload w = MakeWorkload(seed, kDevices, /*rounds=*/6);
      auto configure = [&](KVStore& store) {
        if (use_optimizer) {
          auto sgd = Optimizer::Create("sgd", {{"learning_rate", "0.1"},
                                               {"momentum", "0.9"},
                                               {"wd", "0.001"},
                                               {"rescale_grad", "0.25"}});
          ASSERT_THAT(store.SetOptimizer(std::move(sgd).value()), IsOk());
        } else {
          store.SetUpdater([](int key, const NDArray& grad, const NDArray& weight) -> absl::Status {
            ASSIGN_OR_RETURN(NDArray step, grad * (0.01 * (key + 1)));
            return weight -= step;
          });
        }
      };
      auto reference_store = *KVStore::Create("local_update_cpu");
      configure(*reference_store);
      const auto reference = RunWorkload(owned->get(), *reference_store, w, 1, /*presum=*/true);
      for (const std::string& type : kLocalTypes) {
        SCOPED_TRACE(type);
        auto store = *KVStore::Create(type);
        configure(*store);
        const auto got = RunWorkload(owned->get(), *store, w, kDevices, /*presum=*/false);
        for (size_t k = 0; k < got.size(); ++k) {
          for (int d = 0; d < kDevices; ++d) {
            ASSERT_EQ(got[k][d].size(), reference[k][0].size());
            for (size_t i = 0; i < got[k][d].size(); ++i) {
              EXPECT_NEAR(got[k][d][i], reference[k][0][i], 1e-6) << "key " << k << " device " << d;
            }
          }
        }
      }
    }
  }
}

// ---- Errors: INVALID_ARGUMENT before anything is pushed; the store unchanged ----

TEST_P(KVStoreTest, BadKeysAndListsAreRejected) {
  ASSERT_THAT(store_->Init({1}, {Arr({1, 2})}), IsOk());
  EXPECT_THAT(
      store_->Push({99}, {{Arr({1, 2})}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 99 was never initialized")));
  NDArray out = Arr({0, 0});
  EXPECT_THAT(store_->Pull({99}, {{out}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 99")));
  EXPECT_THAT(
      store_->Init({1}, {Arr({1, 2})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 1 is already initialized")));
  EXPECT_THAT(store_->Init({2, 2}, {Arr({1}), Arr({2})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 2 is given twice")));
  EXPECT_THAT(store_->Init({2}, {Arr({5})}), IsOk());  // the failed Init left no key 2
  EXPECT_THAT(store_->Init({3}, {Arr({1}), Arr({2})}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->Push({1, 2}, {{Arr({1, 2})}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 keys but 1 lists")));
  EXPECT_THAT(store_->Push({1}, {{}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no arrays")));
  EXPECT_THAT(store_->Push({1}, {{NDArray()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none array")));
  EXPECT_THAT(PullAll(1, 2, 1), ElementsAre(ElementsAre(1, 2)));
  EXPECT_THAT(PullAll(2, 1, 1), ElementsAre(ElementsAre(5)));
}

TEST_P(KVStoreTest, MismatchedArraysNameTheKeyAndBothShapes) {
  ASSERT_THAT(store_->Init({4, 5}, {Arr({1, 2, 3, 4, 5, 6}, 0, {2, 3}), Arr({1})}), IsOk());
  EXPECT_THAT(
      store_->Push({4}, {{Arr({1, 2, 3, 4, 5, 6}, 0, {2, 3}), Arr({1, 2, 3, 4, 5, 6}, 1, {3, 2})}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("key 4"), HasSubstr("(3,2)"), HasSubstr("(2,3)"))));
  NDArray f64 = *FromVector<double>(rt(), Shape{1}, std::vector<double>{1});
  EXPECT_THAT(store_->Push({5}, {{f64}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key 5"), HasSubstr("float64"), HasSubstr("float32"))));
  NDArray wrong = Arr({0, 0, 0, 0, 0, 0}, 0, {6});
  EXPECT_THAT(store_->Pull({4}, {{wrong}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key 4"), HasSubstr("(6,)"), HasSubstr("(2,3)"))));
  // A call that fails on one key changes no key, whatever the order.
  EXPECT_THAT(store_->Push({5, 4}, {{Arr({9})}, {Arr({1, 2, 3, 4, 5, 6})}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->PushPull({5}, {{Arr({9})}}, {{wrong}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PullAll(5, 1, 2), Each(ElementsAre(1)));
  EXPECT_THAT(Get(wrong), Each(0));
}

TEST_P(KVStoreTest, OptimizerChecksEveryCopyFirst) {
  EXPECT_THAT(store_->SetOptimizer(nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(store_->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "1"}})), IsOk());
  ASSERT_NE(store_->optimizer(), nullptr);
  NDArray f64 = *FromVector<double>(rt(), Shape{1}, std::vector<double>{1});
  ASSERT_THAT(store_->Init({0, 1}, {Arr({1}), f64}), IsOk());
  EXPECT_THAT(
      store_->Push({0, 1}, {{Arr({1})}, {f64}}),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("sgd"), HasSubstr("float32"))));
  EXPECT_THAT(PullAll(0, 1, 1), ElementsAre(ElementsAre(1)));
  EXPECT_EQ(store_->optimizer()->num_update(), 0);
  ASSERT_THAT(store_->Push({0}, {{Arr({0.25f}, 0), Arr({0.25f}, 1)}}), IsOk());
  EXPECT_THAT(PullAll(0, 1, 2), Each(ElementsAre(0.5f)));
  store_->SetUpdater(nullptr);
  EXPECT_EQ(store_->optimizer(), nullptr);
}

// The allreduce types keep one weight per device of the first push.
TEST_P(KVStoreTest, AllreduceDevicesAreFixedByTheFirstPush) {
  if (!allreduce()) GTEST_SKIP() << GetParam() << " keeps one CPU copy";
  ASSERT_THAT(store_->Init({0}, {Arr({0})}), IsOk());
  ASSERT_THAT(store_->Push({0}, {{Arr({1}, 0), Arr({2}, 1)}}), IsOk());
  EXPECT_THAT(store_->Push({0}, {{Arr({1}, 0), Arr({2}, 3)}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu(3)")));
  ASSERT_THAT(store_->Push({0}, {{Arr({5}, 1)}}), IsOk());  // a subset is fine
  EXPECT_THAT(PullAll(0, 1, 4), Each(ElementsAre(5)));      // other devices read the first copy
}

TEST_P(KVStoreTest, GpuArraysThroughTheCpuStore) {
  absl::StatusOr<NDArray> probe = NDArray::Empty(rt(), Shape{1}, Context::GPU(0));
  if (!probe.ok()) GTEST_SKIP() << "no GPU: " << probe.status().message();
  ASSERT_THAT(store_->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "1"}})), IsOk());
  NDArray g = *CopyTo(Arr({1, 2}), Context::GPU(0));
  ASSERT_THAT(store_->Init({0}, {g}), IsOk());
  ASSERT_THAT(store_->Push({0}, {{g}}), IsOk());
  NDArray out = *CopyTo(Arr({0, 0}), Context::GPU(0));
  ASSERT_THAT(store_->Pull({0}, {{out}}), IsOk());
  EXPECT_THAT(Get(out), ElementsAre(0, 0));
}

}  // namespace
}  // namespace tessera::kvstore
