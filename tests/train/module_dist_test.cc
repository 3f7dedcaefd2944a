// Module on the dist KVStores, in-process: two Modules in threads as workers 0 and 1 of one
// in-process parameter server. Updating on the servers (update_on_kvstore, the default) and
// on the workers with the servers only summing must give the same weights: both apply SGD
// to the same summed gradient.
#include <random>
#include <thread>

#include "core/status_matchers.h"
#include "examples/models.h"
#include "gtest/gtest.h"
#include "io/ndarray_iter.h"
#include "kvstore/dist_kvstore.h"
#include "server/parameter_server.h"
#include "tests/ndarray/test_util.h"
#include "train/module.h"

namespace tessera::train {
namespace {

using tessera::testing::IsOk;

// Worker `rank`'s rows: 160 samples of 8 features, 2 classes, split in halves.
std::unique_ptr<io::NDArrayIter> Part(const Runtime& rt, int rank) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> x(160 * 8), y(160);
  for (int i = 0; i < 160; ++i) {
    float s = 0;
    for (int j = 0; j < 8; ++j) s += (x[i * 8 + j] = normal(rng)) * (j % 3 - 1);
    y[i] = s > 0;
  }
  std::vector<float> xs(x.begin() + rank * 80 * 8, x.begin() + (rank + 1) * 80 * 8);
  std::vector<float> ys(y.begin() + rank * 80, y.begin() + (rank + 1) * 80);
  auto data = FromVector<float>(rt, Shape{80, 8}, xs);
  auto label = FromVector<float>(rt, Shape{80}, ys);
  return std::move(io::NDArrayIter::Create(rt, *data, *label, {.batch_size = 10}).value());
}

// Trains both workers; returns worker 0's weights.
std::map<std::string, std::vector<float>> Train(bool update_on_kvstore) {
  kvstore::ServerStoreOptions options;
  options.num_workers = 2;
  auto ps = server::ParameterServer::Start("127.0.0.1:0", options);
  EXPECT_THAT(ps, IsOk());
  std::vector<std::map<std::string, std::vector<float>>> weights(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      // A runtime per worker, as separate processes have: a shared one's random generator
      // would hand the two initializations interleaved draws.
      auto own = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
      const Runtime& rt = own->get();
      auto iter = Part(rt, rank);
      Module mod(rt, *examples::MlpWithWidths({12}, 2));
      FitOptions fit{.num_epoch = 3, .kvstore = "dist_sync", .optimizer = "sgd",
                     .optimizer_params = {{"learning_rate", "0.2"}}, .seed = 4};
      fit.update_on_kvstore = update_on_kvstore;
      fit.kvstore_factory = [&](const std::string& type) {
        kvstore::DistKVStoreOptions o;
        o.cluster.index = rank;
        o.cluster.servers = {(*ps)->address()};
        o.cluster.workers = {"", ""};
        return kvstore::CreateDistKVStore(type, o);
      };
      ASSERT_THAT(mod.Fit(iter.get(), nullptr, fit), IsOk());
      auto params = mod.GetArgParams();  // named: a range-for over *temporary would dangle
      ASSERT_THAT(params, IsOk());
      for (const auto& [name, a] : *params) weights[rank][name] = *a.AsVector<float>();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(weights[0], weights[1]);  // dist_sync: every worker ends with the servers' weights
  return weights[0];
}

// One process at batch 20 over both halves, interleaved as the two workers' batches.
std::map<std::string, std::vector<float>> TrainLocally(const Runtime& rt) {
  std::vector<float> x, y;
  auto p0 = Part(rt, 0), p1 = Part(rt, 1);
  for (int t = 0; t < 8; ++t) {
    for (auto* p : {p0.get(), p1.get()}) {
      EXPECT_TRUE(*p->Next());
      auto xs = *p->Value().data[0].AsVector<float>();
      auto ys = *p->Value().label[0].AsVector<float>();
      x.insert(x.end(), xs.begin(), xs.end());
      y.insert(y.end(), ys.begin(), ys.end());
    }
  }
  auto data = FromVector<float>(rt, Shape{160, 8}, x);
  auto label = FromVector<float>(rt, Shape{160}, y);
  auto iter = std::move(io::NDArrayIter::Create(rt, *data, *label, {.batch_size = 20}).value());
  Module mod(rt, *examples::MlpWithWidths({12}, 2));
  EXPECT_THAT(mod.Fit(iter.get(), nullptr, {.num_epoch = 3, .kvstore = "local", .optimizer = "sgd",
                                            .optimizer_params = {{"learning_rate", "0.2"}}, .seed = 4}),
              IsOk());
  std::map<std::string, std::vector<float>> weights;
  auto params = mod.GetArgParams();
  for (const auto& [name, a] : *params) weights[name] = *a.AsVector<float>();
  return weights;
}

TEST(ModuleDistTest, UpdatingOnTheServersEqualsUpdatingOnTheWorkers) {
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const auto on_servers = Train(true);
  const auto on_workers = Train(false);
  const auto local = TrainLocally(owned->get());
  for (const auto& [name, w] : local) {
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], on_servers.at(name)[i], 1e-5) << "servers " << name << "[" << i << "]";
      EXPECT_NEAR(w[i], on_workers.at(name)[i], 1e-5) << "workers " << name << "[" << i << "]";
    }
  }
  ASSERT_EQ(on_servers.size(), on_workers.size());
  for (const auto& [name, w] : on_servers) {
    ASSERT_EQ(w.size(), on_workers.at(name).size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], on_workers.at(name)[i], 1e-5) << name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace tessera::train
