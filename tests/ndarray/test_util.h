// Shared set-up for the NDArray tests: a real runtime on either engine, selected by a
// test parameter, so every behaviour is checked on the synchronous reference engine and on
// the threaded one.
#ifndef TESSERA_TESTS_NDARRAY_TEST_UTIL_H_
#define TESSERA_TESTS_NDARRAY_TEST_UTIL_H_

#include <memory>
#include <string>

#include "core/check.h"
#include "core/status_matchers.h"  // IsOkAndHolds, used by its includers
#include "engine/create_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

#define TESSERA_INSTANTIATE_ENGINES(Fixture)                                             \
  INSTANTIATE_TEST_SUITE_P(Engines, Fixture,                                             \
                           ::testing::Values(::tessera::testing::EngineKind::kNaive,     \
                                             ::tessera::testing::EngineKind::kThreaded), \
                           ::tessera::testing::EngineName)

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_NDARRAY_TEST_UTIL_H_
