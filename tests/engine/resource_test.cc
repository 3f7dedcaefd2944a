#include "engine/resource.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "engine/create_engine.h"
#include "engine/engine.h"
#include "engine/philox.h"
#include "engine/storage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::engine {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const ResourceRequest kRandom{ResourceRequest::kRandom};
const ResourceRequest kTempSpace{ResourceRequest::kTempSpace};

std::vector<uint32_t> Draw(PhiloxRandom rng, int n) {
  std::vector<uint32_t> out(n);
  for (uint32_t& x : out) x = rng.NextU32();
  return out;
}

// Every test runs on both engines: the naive one runs pushes inline, the threaded one on
// worker threads, which is where a missing dependency would show.
class ResourceTest : public ::testing::TestWithParam<EngineOptions::Kind> {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.kind = GetParam();
    options.cpu_workers = 4;
    absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(options);
    ASSERT_THAT(engine, IsOk());
    storage_ = Storage::Create();
    engine_ = *std::move(engine);
  }

  // Runs `fn` as an engine function that mutates `res.var`, as operators must, and waits.
  void RunWith(const Resource& res, std::function<void()> fn) {
    ASSERT_THAT(engine_->PushSync(
                    [fn](RunContext) {
                      fn();
                      return absl::OkStatus();
                    },
                    Context::CPU(), {}, {res.var}),
                IsOk());
    ASSERT_THAT(engine_->WaitForVar(res.var), IsOk());
  }

  // Declared first so it is destroyed last: the engine may still run functions that
  // hold its blocks while it shuts down.
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(ResourceTest, RandomIsOnePerDeviceAndReproducibleFromTheSeed) {
  ResourceManager manager(engine_.get(), storage_.get(), /*seed=*/1234, 1);
  absl::StatusOr<Resource> cpu0 = manager.Request(Context::CPU(0), kRandom);
  absl::StatusOr<Resource> again = manager.Request(Context::CPU(0), kRandom);
  absl::StatusOr<Resource> cpu1 = manager.Request(Context::CPU(1), kRandom);
  ASSERT_THAT(cpu0, IsOk());
  ASSERT_THAT(again, IsOk());
  ASSERT_THAT(cpu1, IsOk());
  EXPECT_EQ(cpu0->type, ResourceRequest::kRandom);
  EXPECT_EQ(cpu0->id, again->id);
  EXPECT_TRUE(cpu0->var == again->var);
  EXPECT_NE(cpu0->id, cpu1->id);
  EXPECT_FALSE(cpu0->var == cpu1->var);

  std::vector<uint32_t> drawn0, drawn1;
  RunWith(*cpu0, [&] { drawn0 = Draw(*cpu0->get_random(), 16); });
  RunWith(*cpu1, [&] { drawn1 = Draw(*cpu1->get_random(), 16); });
  EXPECT_EQ(drawn0, Draw(PhiloxRandom(1234, RandomSubsequence(Context::CPU(0))), 16));
  EXPECT_EQ(drawn1, Draw(PhiloxRandom(1234, RandomSubsequence(Context::CPU(1))), 16));
  EXPECT_NE(drawn0, drawn1);
  EXPECT_NE(RandomSubsequence(Context::CPU(0)), RandomSubsequence(Context::GPU(0)));
  EXPECT_NE(RandomSubsequence(Context::CPU(0)), RandomSubsequence(Context::CPUPinned(0)));

  // A second manager with the same seed reproduces the stream.
  ResourceManager twin(engine_.get(), storage_.get(), /*seed=*/1234, 1);
  absl::StatusOr<Resource> twin0 = twin.Request(Context::CPU(0), kRandom);
  ASSERT_THAT(twin0, IsOk());
  std::vector<uint32_t> twin_drawn;
  RunWith(*twin0, [&] {
    PhiloxRandom* rng = twin0->get_random();
    for (int i = 0; i < 16; ++i) twin_drawn.push_back(rng->NextU32());
  });
  EXPECT_EQ(twin_drawn, drawn0);
}

TEST_P(ResourceTest, SeedRandomIsOrderedAfterFunctionsAlreadyPushed) {
  ResourceManager manager(engine_.get(), storage_.get(), /*seed=*/1, 1);
  absl::StatusOr<Resource> rng = manager.Request(Context::CPU(0), kRandom);
  ASSERT_THAT(rng, IsOk());
  const uint64_t subsequence = RandomSubsequence(Context::CPU(0));
  std::vector<uint32_t> before, after;
  // Slow enough that a reseed not ordered through the engine would land first.
  ASSERT_THAT(engine_->PushSync(
                  [&](RunContext) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    before = Draw(*rng->get_random(), 8);
                    rng->get_random()->Skip(8);
                    return absl::OkStatus();
                  },
                  Context::CPU(), {}, {rng->var}),
              IsOk());
  ASSERT_THAT(manager.SeedRandom(2), IsOk());
  ASSERT_THAT(engine_->PushSync(
                  [&](RunContext) {
                    after = Draw(*rng->get_random(), 8);
                    return absl::OkStatus();
                  },
                  Context::CPU(), {}, {rng->var}),
              IsOk());
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_EQ(before, Draw(PhiloxRandom(1, subsequence), 8));
  EXPECT_EQ(after, Draw(PhiloxRandom(2, subsequence), 8));

  // Generators created after the reseed use the new seed as well.
  absl::StatusOr<Resource> late = manager.Request(Context::CPU(3), kRandom);
  ASSERT_THAT(late, IsOk());
  std::vector<uint32_t> late_drawn;
  RunWith(*late, [&] { late_drawn = Draw(*late->get_random(), 8); });
  EXPECT_EQ(late_drawn, Draw(PhiloxRandom(2, RandomSubsequence(Context::CPU(3))), 8));
}

TEST_P(ResourceTest, TempSpaceGrowsThroughStorageAndStaysAligned) {
  ResourceManager manager(engine_.get(), storage_.get(), 0, 1);
  absl::StatusOr<Resource> res = manager.Request(Context::CPU(0), kTempSpace);
  ASSERT_THAT(res, IsOk());
  EXPECT_EQ(res->type, ResourceRequest::kTempSpace);
  void* small = nullptr;
  void* smaller = nullptr;
  void* large = nullptr;
  RunWith(*res, [&] {
    small = *res->get_space(100);
    std::memset(small, 1, 100);
    smaller = *res->get_space(128);  // same 128-byte block: no growth
    large = *res->get_space(10000);
    std::memset(large, 2, 10000);
  });
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % 64, 0u);
  EXPECT_EQ(smaller, small);
  StorageStats stats = storage_->Stats(Context::CPU(0));
  EXPECT_EQ(stats.bytes_in_use, 16384u);  // only the grown buffer is held
  EXPECT_EQ(stats.bytes_pooled, 0u);      // the old one went back to the system
  EXPECT_EQ(stats.allocations, 2u);
}

TEST_P(ResourceTest, TempSpaceCopiesAreHandedOutRoundRobin) {
  ResourceManager manager(engine_.get(), storage_.get(), 0, /*temp_space_copies=*/3);
  EXPECT_EQ(manager.temp_space_copies(), 3);
  std::vector<Resource> got;
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<Resource> res = manager.Request(Context::CPU(0), kTempSpace);
    ASSERT_THAT(res, IsOk());
    got.push_back(*res);
  }
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(got[i].id, got[i % 3].id) << i;
    EXPECT_TRUE(got[i].var == got[i % 3].var) << i;
  }
  EXPECT_NE(got[0].id, got[1].id);
  EXPECT_NE(got[1].id, got[2].id);
  EXPECT_FALSE(got[0].var == got[2].var);
  // Another device has copies of its own.
  absl::StatusOr<Resource> other = manager.Request(Context::CPU(1), kTempSpace);
  ASSERT_THAT(other, IsOk());
  for (const Resource& r : got) EXPECT_NE(other->id, r.id);
}

// The guard: functions pushed from two threads all write their own pattern into the one
// shared temp space, byte by byte with yields in between, then check it. Because each
// lists the resource's variable as mutated, none may ever see another's bytes.
TEST_P(ResourceTest, VariableGuardsTempSpaceAgainstConcurrentUse) {
  constexpr int kThreads = 2;
  constexpr int kPushesPerThread = 200;
  constexpr size_t kBytes = 256;
  ResourceManager manager(engine_.get(), storage_.get(), 0, 1);
  absl::StatusOr<Resource> res = manager.Request(Context::CPU(0), kTempSpace);
  ASSERT_THAT(res, IsOk());
  std::atomic<int> interleavings{0};
  std::atomic<int> ran{0};
  std::atomic<int> push_errors{0};

  auto pusher = [&](int thread_id) {
    for (int i = 0; i < kPushesPerThread; ++i) {
      const auto pattern = static_cast<uint8_t>(1 + thread_id * 100 + i % 100);
      absl::Status pushed = engine_->PushSync(
          [&, pattern](RunContext) -> absl::Status {
            absl::StatusOr<void*> space = res->get_space(kBytes);
            if (!space.ok()) return space.status();
            auto* bytes = static_cast<volatile uint8_t*>(*space);
            for (size_t b = 0; b < kBytes; ++b) {
              bytes[b] = pattern;
              if (b % 64 == 0) std::this_thread::yield();
            }
            for (size_t b = 0; b < kBytes; ++b) {
              if (bytes[b] != pattern) {
                ++interleavings;
                break;
              }
            }
            ++ran;
            return absl::OkStatus();
          },
          Context::CPU(), {}, {res->var}, FnProperty::kNormal, 0, "PatternWriter");
      if (!pushed.ok()) ++push_errors;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(pusher, t);
  for (std::thread& t : threads) t.join();
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_EQ(push_errors.load(), 0);
  EXPECT_EQ(ran.load(), kThreads * kPushesPerThread);
  EXPECT_EQ(interleavings.load(), 0);
}

TEST_P(ResourceTest, GetSpaceReportsOutOfMemoryWithSizeAndDevice) {
  StorageOptions options;
  options.cpu_limit_bytes = 1 << 20;
  std::unique_ptr<Storage> limited = Storage::Create(options);
  {
    ResourceManager manager(engine_.get(), limited.get(), 0, 1);
    absl::StatusOr<Resource> res = manager.Request(Context::CPU(0), kTempSpace);
    ASSERT_THAT(res, IsOk());
    absl::Status status;
    RunWith(*res, [&] { status = res->get_space(size_t{2} << 20).status(); });
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted,
                                 AllOf(HasSubstr("temp space resource"),
                                       HasSubstr("2097152 bytes on cpu(0)"))));
    // Still usable at a size that fits.
    absl::StatusOr<void*> fits;
    RunWith(*res, [&] { fits = res->get_space(4096); });
    EXPECT_THAT(fits, IsOk());
  }
  EXPECT_EQ(limited->Stats(Context::CPU(0)).bytes_in_use, 0u);
}

TEST_P(ResourceTest, WrongUseOfAResourceIsAnError) {
  ResourceManager manager(engine_.get(), storage_.get(), 0, 1);
  absl::StatusOr<Resource> rng = manager.Request(Context::CPU(0), kRandom);
  ASSERT_THAT(rng, IsOk());
  EXPECT_THAT(rng->get_space(16),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not temp space")));
  EXPECT_THAT(Resource().get_space(16),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no ResourceManager")));
  EXPECT_THAT(
      manager.Request(Context::CPU(0), ResourceRequest{static_cast<ResourceRequest::Type>(7)}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown resource type 7")));
  EXPECT_THAT(manager.Request(Context::CPU(-2), kTempSpace),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu(-2)")));
}

TEST_P(ResourceTest, GpuRequestWithoutDeviceFailsUpFront) {
  ResourceManager manager(engine_.get(), storage_.get(), 0, 1);
  absl::StatusOr<Resource> res = manager.Request(Context::GPU(0), kTempSpace);
  if (res.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THAT(
      res, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device for gpu(0)")));
  EXPECT_THAT(manager.Request(Context::GPU(0), kRandom),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gpu(0)")));
}

TEST_P(ResourceTest, DestructorWaitsThenFreesBuffersAndDeletesVariables) {
  std::atomic<bool> finished{false};
  VarHandle var;
  {
    ResourceManager manager(engine_.get(), storage_.get(), 0, 2);
    absl::StatusOr<Resource> a = manager.Request(Context::CPU(0), kTempSpace);
    absl::StatusOr<Resource> b = manager.Request(Context::CPU(0), kTempSpace);
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(b, IsOk());
    var = a->var;
    RunWith(*b, [&] { ASSERT_THAT(b->get_space(5000), IsOk()); });
    // Still running when the destructor starts: it must wait, then free.
    ASSERT_THAT(engine_->PushSync(
                    [&, a = *a](RunContext) {
                      std::this_thread::sleep_for(std::chrono::milliseconds(30));
                      absl::StatusOr<void*> space = a.get_space(3 << 20);
                      if (!space.ok()) return space.status();
                      std::memset(*space, 7, 3 << 20);
                      finished = true;
                      return absl::OkStatus();
                    },
                    Context::CPU(), {}, {a->var}),
                IsOk());
  }
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(storage_->Stats(Context::CPU(0)).bytes_in_use, 0u);
  // The variable is gone: pushes naming it are rejected.
  EXPECT_FALSE(
      engine_->PushSync([](RunContext) { return absl::OkStatus(); }, Context::CPU(), {}, {var})
          .ok());
  EXPECT_THAT(engine_->WaitForAll(), IsOk());
}

TEST_P(ResourceTest, PrivateTempSpaceIsItsOwnAndFreedAfterItsLastUse) {
  ResourceManager manager(engine_.get(), storage_.get(), 0, 1);
  absl::StatusOr<Resource> shared = manager.Request(Context::CPU(0), kTempSpace);
  absl::StatusOr<Resource> mine = manager.RequestPrivateTempSpace(Context::CPU(0));
  absl::StatusOr<Resource> yours = manager.RequestPrivateTempSpace(Context::CPU(0));
  ASSERT_THAT(shared, IsOk());
  ASSERT_THAT(mine, IsOk());
  ASSERT_THAT(yours, IsOk());
  EXPECT_EQ(mine->type, ResourceRequest::kTempSpace);
  EXPECT_FALSE(mine->var == shared->var);
  EXPECT_FALSE(mine->var == yours->var);
  EXPECT_NE(mine->id, yours->id);
  // Not handed out by Request: the shared copy stays the only one.
  absl::StatusOr<Resource> again = manager.Request(Context::CPU(0), kTempSpace);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->var == shared->var);

  // Released while a function still uses it: the buffer outlives that function.
  std::atomic<bool> finished{false};
  ASSERT_THAT(engine_->PushSync(
                  [&, r = *mine](RunContext) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(30));
                    absl::StatusOr<void*> space = r.get_space(1 << 20);
                    if (!space.ok()) return space.status();
                    std::memset(*space, 3, 1 << 20);
                    finished = true;
                    return absl::OkStatus();
                  },
                  Context::CPU(), {}, {mine->var}),
              IsOk());
  manager.ReleasePrivateTempSpace(*mine);
  EXPECT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(storage_->Stats(Context::CPU(0)).bytes_in_use, 0u);
  EXPECT_FALSE(engine_->PushSync([](RunContext) { return absl::OkStatus(); }, Context::CPU(), {},
                                 {mine->var})
                   .ok());
  // `yours` is never released: the manager's destructor frees it with the others.
  RunWith(*yours, [&] { ASSERT_THAT(yours->get_space(4096), IsOk()); });
  EXPECT_THAT(manager.RequestPrivateTempSpace(Context::CPU(-1)), StatusIs(absl::StatusCode::kInvalidArgument));
}

INSTANTIATE_TEST_SUITE_P(Engines, ResourceTest,
                         ::testing::Values(EngineOptions::Kind::kNaive,
                                           EngineOptions::Kind::kThreaded),
                         [](const ::testing::TestParamInfo<EngineOptions::Kind>& info) {
                           return info.param == EngineOptions::Kind::kNaive ? "Naive" : "Threaded";
                         });

TEST(ResourceManagerEnvTest, TempSpaceCopiesComeFromTheEnvironment) {
  constexpr const char* kVar = "TESSERA_TEMP_SPACE_COPIES";
  ::unsetenv(kVar);
  EXPECT_THAT(ResourceManager::TempSpaceCopiesFromEnv(), IsOk());
  EXPECT_EQ(*ResourceManager::TempSpaceCopiesFromEnv(), 1);
  ::setenv(kVar, "4", 1);
  EXPECT_EQ(*ResourceManager::TempSpaceCopiesFromEnv(), 4);
  EngineOptions options;
  options.kind = EngineOptions::Kind::kNaive;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(options);
  ASSERT_THAT(engine, IsOk());
  std::unique_ptr<Storage> storage = Storage::Create();
  {
    ResourceManager manager(engine->get(), storage.get());
    EXPECT_EQ(manager.temp_space_copies(), 4);
  }
  for (const char* bad : {"0", "-3", "two"}) {
    ::setenv(kVar, bad, 1);
    EXPECT_THAT(ResourceManager::TempSpaceCopiesFromEnv(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(kVar)))
        << bad;
  }
  {
    ResourceManager manager(engine->get(), storage.get());  // falls back to 1
    EXPECT_EQ(manager.temp_space_copies(), 1);
  }
  ::unsetenv(kVar);
}

}  // namespace
}  // namespace tessera::engine
