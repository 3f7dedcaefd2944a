// Shared set-up for the NDArray tests: a real runtime on either engine, selected by a
// test parameter, so every behaviour is checked on the synchronous reference engine and on
// the threaded one.
#ifndef TESSERA_TESTS_NDARRAY_TEST_UTIL_H_
#define TESSERA_TESTS_NDARRAY_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/status_matchers.h"  // IsOkAndHolds, used by its includers
#include "engine/create_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera::testing {

using EngineKind = engine::EngineOptions::Kind;

inline std::unique_ptr<OwnedRuntime> MakeRuntime(EngineKind kind, uint64_t seed = 0) {
  engine::EngineOptions options;
  options.kind = kind;
  options.cpu_workers = 2;
  auto rt = OwnedRuntime::Create(options, engine::StorageOptions{}, seed);
  TESSERA_CHECK(rt.ok());
  return std::move(rt).value();
}

inline std::string EngineName(const ::testing::TestParamInfo<EngineKind>& info) {
  return info.param == EngineKind::kNaive ? "Naive" : "Threaded";
}

// Fixture: rt() is a fresh runtime per test. Arrays made in a test body are destroyed
// before the runtime (members outlive the body).
class EngineTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override { owned_ = MakeRuntime(GetParam()); }
  const Runtime& rt() const { return owned_->get(); }

  std::unique_ptr<OwnedRuntime> owned_;
};

// One small array of every dtype, with distinct shapes and values at the types' edges.
inline std::vector<NDArray> ArraysOfEveryDType(const Runtime& rt) {
  std::vector<NDArray> out;
  out.push_back(*FromVector<float>(rt, Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
  out.push_back(*FromVector<double>(rt, Shape{3}, std::vector<double>{0.1, 0.2, 1e300}));
  out.push_back(*FromVector<Half>(rt, Shape{2}, std::vector<Half>{Half(0.5f), Half(-3.0f)}));
  out.push_back(*FromVector<BFloat16>(rt, Shape{1, 2},
                                      std::vector<BFloat16>{BFloat16(2.0f), BFloat16(-1.0f)}));
  out.push_back(*FromVector<uint8_t>(rt, Shape{4}, std::vector<uint8_t>{0, 1, 200, 255}));
  out.push_back(*FromVector<int8_t>(rt, Shape{2, 1}, std::vector<int8_t>{-128, 127}));
  out.push_back(*FromVector<int32_t>(rt, Shape{1}, std::vector<int32_t>{-123456}));
  out.push_back(
      *FromVector<int64_t>(rt, Shape{2, 2, 1}, std::vector<int64_t>{int64_t{1} << 40, -1, 0, 7}));
  return out;
}

#define TESSERA_INSTANTIATE_ENGINES(Fixture)                                             \
  INSTANTIATE_TEST_SUITE_P(Engines, Fixture,                                             \
                           ::testing::Values(::tessera::testing::EngineKind::kNaive,     \
                                             ::tessera::testing::EngineKind::kThreaded), \
                           ::tessera::testing::EngineName)

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_NDARRAY_TEST_UTIL_H_
