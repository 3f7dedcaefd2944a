#include "engine/storage.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::engine {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

uintptr_t Addr(const StorageHandle& h) { return reinterpret_cast<uintptr_t>(h.dptr); }

TEST(StorageSizeClassTest, PowersOfTwoUpToOneMiBThenMiBMultiples) {
  EXPECT_EQ(StorageSizeClass(1), 64u);
  EXPECT_EQ(StorageSizeClass(64), 64u);
  EXPECT_EQ(StorageSizeClass(65), 128u);
  EXPECT_EQ(StorageSizeClass(1000), 1024u);
  EXPECT_EQ(StorageSizeClass(4097), 8192u);
  EXPECT_EQ(StorageSizeClass(kMiB), kMiB);
  EXPECT_EQ(StorageSizeClass(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(StorageSizeClass(3 * kMiB - 5), 3 * kMiB);
  EXPECT_EQ(StorageSizeClass(5 * kMiB), 5 * kMiB);
}

TEST(StorageTest, EveryBlockIs64ByteAlignedAndWritable) {
  auto storage = Storage::Create();
  std::vector<StorageHandle> handles;
  for (size_t bytes :
       {size_t{1}, size_t{3}, size_t{63}, size_t{64}, size_t{65}, size_t{100}, size_t{255},
        size_t{4095}, size_t{4097}, 100 * kKiB, kMiB - 1, kMiB + 1, 3 * kMiB + 17}) {
    for (Context ctx : {Context::CPU(0), Context::CPUPinned(0)}) {
      absl::StatusOr<StorageHandle> h = storage->Alloc(bytes, ctx);
      ASSERT_THAT(h, IsOk());
      EXPECT_EQ(Addr(*h) % 64, 0u) << bytes << " bytes on " << ctx.ToString();
      EXPECT_EQ(h->size, bytes);
      EXPECT_EQ(h->ctx, ctx);
      std::memset(h->dptr, 0xab, bytes);  // ASan catches a block smaller than asked
      handles.push_back(*h);
    }
  }
  for (const StorageHandle& h : handles) storage->Free(h);
  EXPECT_EQ(storage->Stats(Context::CPU(0)).bytes_in_use, 0u);
  EXPECT_EQ(storage->Stats(Context::CPUPinned(0)).bytes_in_use, 0u);
}

TEST(StorageTest, ZeroBytesGivesNullHandleThatFreeIgnores) {
  auto storage = Storage::Create();
  absl::StatusOr<StorageHandle> h = storage->Alloc(0, Context::CPU(0));
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->dptr, nullptr);
  EXPECT_EQ(h->size, 0u);
  storage->Free(*h);
  storage->DirectFree(*h);
  StorageStats stats = storage->Stats(Context::CPU(0));
  EXPECT_EQ(stats.allocations, 0u);
  EXPECT_EQ(stats.invalid_frees, 0u);
}

TEST(StorageTest, FreeThenAllocOfSameClassIsAPoolHit) {
  auto storage = Storage::Create();
  const Context cpu = Context::CPU(0);
  absl::StatusOr<StorageHandle> a = storage->Alloc(1000, cpu);
  ASSERT_THAT(a, IsOk());
  StorageStats stats = storage->Stats(cpu);
  EXPECT_EQ(stats.bytes_in_use, 1024u);
  EXPECT_EQ(stats.bytes_pooled, 0u);
  EXPECT_EQ(stats.allocations, 1u);
  EXPECT_EQ(stats.pool_hits, 0u);

  storage->Free(*a);
  stats = storage->Stats(cpu);
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_pooled, 1024u);

  // 900 bytes rounds to the same 1024-byte class: the freed block comes back.
  absl::StatusOr<StorageHandle> b = storage->Alloc(900, cpu);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->dptr, a->dptr);
  stats = storage->Stats(cpu);
  EXPECT_EQ(stats.bytes_in_use, 1024u);
  EXPECT_EQ(stats.bytes_pooled, 0u);
  EXPECT_EQ(stats.allocations, 2u);
  EXPECT_EQ(stats.pool_hits, 1u);
  EXPECT_DOUBLE_EQ(stats.hit_rate(), 0.5);

  // Another class misses and leaves the pooled block alone.
  storage->Free(*b);
  absl::StatusOr<StorageHandle> c = storage->Alloc(5000, cpu);
  ASSERT_THAT(c, IsOk());
  stats = storage->Stats(cpu);
  EXPECT_EQ(stats.pool_hits, 1u);
  EXPECT_EQ(stats.bytes_in_use, 8192u);
  EXPECT_EQ(stats.bytes_pooled, 1024u);
  storage->Free(*c);
}

TEST(StorageTest, LargeRequestTakesASlightlyLargerPooledBlock) {
  EXPECT_EQ(StorageReuseLimit(1024), 1024u);
  EXPECT_EQ(StorageReuseLimit(kMiB), kMiB);
  EXPECT_EQ(StorageReuseLimit(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(StorageReuseLimit(3 * kMiB), 4 * kMiB);
  EXPECT_EQ(StorageReuseLimit(6 * kMiB), 8 * kMiB);

  auto storage = Storage::Create();
  const Context cpu = Context::CPU(0);
  absl::StatusOr<StorageHandle> big = storage->Alloc(9 * kMiB, cpu);
  absl::StatusOr<StorageHandle> four = storage->Alloc(3 * kMiB + 5, cpu);  // class 4 MiB
  ASSERT_THAT(big, IsOk());
  ASSERT_THAT(four, IsOk());
  storage->Free(*big);
  storage->Free(*four);
  // 3 MiB: its class is empty; the 4 MiB block is within 4/3, the 9 MiB one is not.
  absl::StatusOr<StorageHandle> three = storage->Alloc(3 * kMiB, cpu);
  ASSERT_THAT(three, IsOk());
  EXPECT_EQ(three->dptr, four->dptr);
  StorageStats stats = storage->Stats(cpu);
  EXPECT_EQ(stats.pool_hits, 1u);
  EXPECT_EQ(stats.bytes_in_use, 4 * kMiB);
  EXPECT_EQ(stats.bytes_pooled, 9 * kMiB);
  // Freed, it goes back as the 4 MiB block it is.
  storage->Free(*three);
  stats = storage->Stats(cpu);
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_pooled, 13 * kMiB);
  // 2 MiB may not take the 4 MiB block (over 4/3), and small classes reuse exactly only.
  absl::StatusOr<StorageHandle> two = storage->Alloc(2 * kMiB, cpu);
  ASSERT_THAT(two, IsOk());
  EXPECT_NE(two->dptr, four->dptr);
  EXPECT_EQ(storage->Stats(cpu).pool_hits, 1u);
  storage->Free(*two);
  absl::StatusOr<StorageHandle> small = storage->Alloc(1000, cpu);
  ASSERT_THAT(small, IsOk());
  EXPECT_EQ(storage->Stats(cpu).pool_hits, 1u);
  storage->Free(*small);
}

TEST(StorageTest, FreeAfterStreamOfAHostBlockFreesAtOnce) {
  auto storage = Storage::Create();
  absl::StatusOr<StorageHandle> a = storage->Alloc(1000, Context::CPU(0));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(storage->FreeAfterStream(*a, nullptr), IsOk());
  EXPECT_EQ(storage->Stats(Context::CPU(0)).bytes_in_use, 0u);
  EXPECT_EQ(storage->Stats(Context::CPU(0)).bytes_pooled, 1024u);
}

TEST(StorageTest, DirectFreeBypassesThePool) {
  auto storage = Storage::Create();
  absl::StatusOr<StorageHandle> a = storage->Alloc(2 * kMiB, Context::CPU(0));
  ASSERT_THAT(a, IsOk());
  storage->DirectFree(*a);
  StorageStats stats = storage->Stats(Context::CPU(0));
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_pooled, 0u);
  absl::StatusOr<StorageHandle> b = storage->Alloc(2 * kMiB, Context::CPU(0));
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(storage->Stats(Context::CPU(0)).pool_hits, 0u);
  storage->Free(*b);
}

TEST(StorageTest, ReleaseAllEmptiesOnlyThatDevicesPool) {
  auto storage = Storage::Create();
  std::vector<StorageHandle> handles;
  for (Context ctx : {Context::CPU(0), Context::CPU(1)}) {
    for (size_t bytes : {size_t{100}, 10 * kKiB, 3 * kMiB}) {
      absl::StatusOr<StorageHandle> h = storage->Alloc(bytes, ctx);
      ASSERT_THAT(h, IsOk());
      handles.push_back(*h);
    }
  }
  absl::StatusOr<StorageHandle> kept = storage->Alloc(64, Context::CPU(0));
  ASSERT_THAT(kept, IsOk());
  for (const StorageHandle& h : handles) storage->Free(h);
  const size_t pooled = 128 + 16 * kKiB + 3 * kMiB;
  EXPECT_EQ(storage->Stats(Context::CPU(0)).bytes_pooled, pooled);

  storage->ReleaseAll(Context::CPU(0));
  StorageStats cpu0 = storage->Stats(Context::CPU(0));
  EXPECT_EQ(cpu0.bytes_pooled, 0u);
  EXPECT_EQ(cpu0.bytes_in_use, 64u);  // blocks in use are untouched
  EXPECT_EQ(storage->Stats(Context::CPU(1)).bytes_pooled, pooled);

  // Nothing left to reuse: the next allocation of a released class misses.
  absl::StatusOr<StorageHandle> again = storage->Alloc(100, Context::CPU(0));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(storage->Stats(Context::CPU(0)).pool_hits, 0u);
  storage->Free(*again);
  storage->Free(*kept);
}

TEST(StorageTest, OutOfMemoryNamesSizeAndDevice) {
  StorageOptions options;
  options.cpu_limit_bytes = kMiB;
  auto storage = Storage::Create(options);
  EXPECT_THAT(storage->Alloc(2 * kMiB, Context::CPU(0)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("out of memory allocating 2097152 bytes on cpu(0)"),
                             HasSubstr("limit 1048576 bytes"))));
  // The limit is per device and a failed request changes nothing.
  StorageStats stats = storage->Stats(Context::CPU(0));
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.allocations, 0u);
  absl::StatusOr<StorageHandle> full = storage->Alloc(kMiB, Context::CPU(0));
  ASSERT_THAT(full, IsOk());
  EXPECT_THAT(storage->Alloc(64, Context::CPU(0)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("64 bytes on cpu(0)")));
  absl::StatusOr<StorageHandle> other = storage->Alloc(kMiB, Context::CPU(1));
  ASSERT_THAT(other, IsOk());
  storage->Free(*full);
  storage->Free(*other);
}

TEST(StorageTest, OutOfMemoryReleasesThePoolAndRetries) {
  StorageOptions options;
  options.cpu_limit_bytes = kMiB;
  auto storage = Storage::Create(options);
  absl::StatusOr<StorageHandle> half = storage->Alloc(512 * kKiB, Context::CPU(0));
  ASSERT_THAT(half, IsOk());
  storage->Free(*half);
  ASSERT_EQ(storage->Stats(Context::CPU(0)).bytes_pooled, 512 * kKiB);
  // 512 KiB pooled + 1 MiB new exceeds the limit until the pool is released.
  absl::StatusOr<StorageHandle> full = storage->Alloc(kMiB, Context::CPU(0));
  ASSERT_THAT(full, IsOk());
  StorageStats stats = storage->Stats(Context::CPU(0));
  EXPECT_EQ(stats.bytes_pooled, 0u);
  EXPECT_EQ(stats.bytes_in_use, kMiB);
  storage->Free(*full);
}

TEST(StorageTest, HugeRequestIsResourceExhausted) {
  auto storage = Storage::Create();
  EXPECT_THAT(storage->Alloc(SIZE_MAX, Context::CPU(0)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(std::to_string(SIZE_MAX) + " bytes on cpu(0)")));
}

TEST(StorageTest, NegativeDeviceIdIsInvalid) {
  auto storage = Storage::Create();
  EXPECT_THAT(storage->Alloc(8, Context::CPU(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu(-1)")));
}

TEST(StorageTest, DoubleAndForeignFreesAreCountedAndIgnored) {
  auto storage = Storage::Create();
  const Context cpu = Context::CPU(0);
  absl::StatusOr<StorageHandle> a = storage->Alloc(256, cpu);
  ASSERT_THAT(a, IsOk());
  storage->Free(*a);
  storage->Free(*a);        // twice
  storage->DirectFree(*a);  // and once more, to the system
  alignas(64) static char not_ours[64];
  storage->Free(StorageHandle{not_ours, sizeof(not_ours), cpu});
  StorageStats stats = storage->Stats(cpu);
  EXPECT_EQ(stats.invalid_frees, 3u);
  EXPECT_EQ(stats.bytes_pooled, 256u);  // the block is pooled once, not twice
  // Were it pooled twice, these two live blocks would be the same memory.
  absl::StatusOr<StorageHandle> b = storage->Alloc(256, cpu);
  absl::StatusOr<StorageHandle> c = storage->Alloc(256, cpu);
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  EXPECT_NE(b->dptr, c->dptr);
  // A handle of a device where nothing was allocated is ignored too.
  storage->Free(StorageHandle{b->dptr, 256, Context::CPU(7)});
  EXPECT_EQ(storage->Stats(cpu).bytes_in_use, 512u);
  storage->Free(*b);
  storage->Free(*c);
}

TEST(StorageTest, DestructionReturnsBlocksStillInUse) {
  // LeakSanitizer (--config=asan) fails this test if the blocks are not returned.
  auto storage = Storage::Create();
  for (size_t bytes : {size_t{10}, 10 * kKiB, 10 * kMiB}) {
    ASSERT_THAT(storage->Alloc(bytes, Context::CPU(0)), IsOk());
    ASSERT_THAT(storage->Alloc(bytes, Context::CPUPinned(0)), IsOk());
  }
  storage.reset();
}

// A fake device with `capacity` bytes: fails like cudaMalloc once it is full.
class FakeDeviceAllocator final : public DeviceAllocator {
 public:
  explicit FakeDeviceAllocator(size_t capacity) : capacity_(capacity) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return absl::ResourceExhaustedError("fake device is full");
    used_ += bytes;
    return std::aligned_alloc(256, bytes);
  }
  void Deallocate(void* ptr, size_t bytes) override {
    used_ -= bytes;
    std::free(ptr);
  }

 private:
  const size_t capacity_;
  size_t used_ = 0;
};

TEST(StorageTest, FailedDeviceAllocationReleasesPoolAndRetriesOnce) {
  StorageOptions options;
  options.allocator_factory = [](Context) -> absl::StatusOr<std::unique_ptr<DeviceAllocator>> {
    return std::make_unique<FakeDeviceAllocator>(4 * kMiB);
  };
  auto storage = Storage::Create(options);
  const Context gpu = Context::GPU(0);
  absl::StatusOr<StorageHandle> a = storage->Alloc(3 * kMiB, gpu);
  ASSERT_THAT(a, IsOk());
  storage->Free(*a);
  // The device is full of pooled memory: the pool is released and the retry succeeds.
  absl::StatusOr<StorageHandle> b = storage->Alloc(2 * kMiB, gpu);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(storage->Stats(gpu).bytes_pooled, 0u);
  // Really full: the error names size, device, usage and the device's own message.
  EXPECT_THAT(storage->Alloc(3 * kMiB, gpu),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("out of memory allocating 3145728 bytes on gpu(0)"),
                             HasSubstr("in use 2097152 bytes"), HasSubstr("fake device is full"))));
  storage->Free(*b);
}

TEST(StorageOptionsTest, FromEnvReadsTheLimitAndNamesTheVariableOnError) {
  constexpr const char* kVar = "TESSERA_CPU_MEMORY_LIMIT_BYTES";
  ::unsetenv(kVar);
  ASSERT_THAT(StorageOptions::FromEnv(), IsOk());
  EXPECT_EQ(StorageOptions::FromEnv()->cpu_limit_bytes, 0u);
  ::setenv(kVar, "4096", 1);
  ASSERT_THAT(StorageOptions::FromEnv(), IsOk());
  EXPECT_EQ(StorageOptions::FromEnv()->cpu_limit_bytes, 4096u);
  for (const char* bad : {"lots", "-1", "12k"}) {
    ::setenv(kVar, bad, 1);
    EXPECT_THAT(StorageOptions::FromEnv(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(kVar)))
        << bad;
  }
  ::unsetenv(kVar);
}

// Several threads allocate, fill, check and free blocks of random sizes. Every live block
// is recorded in an interval map: a block overlapping another live one fails at once, and
// a thread whose pattern was overwritten fails when it checks.
class StorageConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(StorageConcurrencyTest, LiveBlocksNeverOverlap) {
  const int num_threads = GetParam();
  constexpr int kIterations = 400;
  constexpr int kMaxLive = 8;
  auto storage = Storage::Create();
  const Context cpu = Context::CPU(0);
  std::mutex live_mu;
  std::map<uintptr_t, uintptr_t> live;  // start -> end of every live block
  std::atomic<int> overlaps{0};
  std::atomic<int> corruptions{0};

  auto worker = [&](int thread_id) {
    std::mt19937 rng(thread_id);
    std::vector<std::pair<StorageHandle, uint8_t>> mine;
    std::vector<uint8_t> expected;
    auto release = [&](size_t index) {
      auto [h, pattern] = mine[index];
      expected.assign(h.size, pattern);  // memcmp, not a byte loop: fast under TSan
      if (std::memcmp(h.dptr, expected.data(), h.size) != 0) ++corruptions;
      {
        std::lock_guard<std::mutex> lock(live_mu);
        live.erase(Addr(h));
      }
      if (rng() % 4 == 0) {
        storage->DirectFree(h);
      } else {
        storage->Free(h);
      }
      mine.erase(mine.begin() + index);
    };
    for (int iter = 0; iter < kIterations; ++iter) {
      // Mostly small sizes, so classes are shared and pool reuse across threads is common.
      const size_t bytes = rng() % 8 == 0 ? 1 + rng() % (2 * kMiB) : 1 + rng() % 4096;
      absl::StatusOr<StorageHandle> h = storage->Alloc(bytes, cpu);
      if (!h.ok()) {
        ADD_FAILURE() << h.status();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(live_mu);
        const uintptr_t start = Addr(*h), end = start + h->size;
        auto next = live.lower_bound(start);
        if (next != live.end() && next->first < end) ++overlaps;
        if (next != live.begin() && std::prev(next)->second > start) ++overlaps;
        live[start] = end;
      }
      const auto pattern = static_cast<uint8_t>(thread_id * 31 + iter);
      std::memset(h->dptr, pattern, h->size);
      mine.emplace_back(*h, pattern);
      if (mine.size() > kMaxLive) release(rng() % mine.size());
    }
    while (!mine.empty()) release(mine.size() - 1);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(corruptions.load(), 0);
  StorageStats stats = storage->Stats(cpu);
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.allocations, static_cast<uint64_t>(num_threads) * kIterations);
  EXPECT_EQ(stats.invalid_frees, 0u);
  EXPECT_GT(stats.pool_hits, 0u);
}

INSTANTIATE_TEST_SUITE_P(Threads, StorageConcurrencyTest, ::testing::Values(1, 2, 4, 8));

// GPU: skipped (with the runtime's reason) where there is no CUDA device.
class StorageGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_ = Storage::Create();
    absl::StatusOr<StorageHandle> probe = storage_->Alloc(0, Context::GPU(0));
    if (!probe.ok()) {
      ASSERT_EQ(probe.status().code(), absl::StatusCode::kFailedPrecondition) << probe.status();
      GTEST_SKIP() << probe.status().message();
    }
  }
  std::unique_ptr<Storage> storage_;
};

TEST(StorageNoGpuTest, GpuContextWithoutDeviceIsAClearError) {
  auto storage = Storage::Create();
  absl::StatusOr<StorageHandle> h = storage->Alloc(1024, Context::GPU(0));
  if (h.ok()) {
    storage->Free(*h);
    GTEST_SKIP() << "a CUDA device is present; StorageGpuTest covers it";
  }
  EXPECT_THAT(
      h, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device for gpu(0)")));
  // The failure is not cached as a broken pool: asking again gives the same error.
  EXPECT_THAT(storage->Alloc(1, Context::GPU(0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gpu(0)")));
  EXPECT_EQ(storage->Stats(Context::GPU(0)).allocations, 0u);
}

TEST_F(StorageGpuTest, PoolReusesBlocksAndHoldsData) {
  const Context gpu = Context::GPU(0);
  absl::StatusOr<StorageHandle> a = storage_->Alloc(3 * kMiB + 5, gpu);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(Addr(*a) % 256, 0u);
#if TESSERA_USE_CUDA
  ASSERT_EQ(cudaMemset(a->dptr, 0x5a, a->size), cudaSuccess);
  std::vector<uint8_t> host(a->size);
  ASSERT_EQ(cudaMemcpy(host.data(), a->dptr, a->size, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host.front(), 0x5a);
  EXPECT_EQ(host.back(), 0x5a);
#endif
  storage_->Free(*a);
  absl::StatusOr<StorageHandle> b = storage_->Alloc(3 * kMiB, gpu);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->dptr, a->dptr);
  StorageStats stats = storage_->Stats(gpu);
  EXPECT_EQ(stats.pool_hits, 1u);
  EXPECT_EQ(stats.bytes_in_use, 4 * kMiB);
  storage_->Free(*b);
  storage_->ReleaseAll(gpu);
  EXPECT_EQ(storage_->Stats(gpu).bytes_pooled, 0u);
}

TEST_F(StorageGpuTest, FreeAfterStreamReturnsTheBlockWhenTheStreamGetsThere) {
  const Context gpu = Context::GPU(0);
  absl::StatusOr<StorageHandle> a = storage_->Alloc(2 * kMiB, gpu);
  ASSERT_THAT(a, IsOk());
#if TESSERA_USE_CUDA
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Work still queued on the stream keeps the block in use until it has run.
  ASSERT_EQ(cudaMemsetAsync(a->dptr, 0, a->size, stream), cudaSuccess);
  ASSERT_THAT(storage_->FreeAfterStream(*a, stream), IsOk());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // The host function has run once the stream is drained; give its thread a moment.
  for (int i = 0; i < 1000 && storage_->Stats(gpu).bytes_in_use != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(storage_->Stats(gpu).bytes_in_use, 0u);
  EXPECT_EQ(storage_->Stats(gpu).bytes_pooled, 2 * kMiB);
  cudaStreamDestroy(stream);
#endif
}

TEST_F(StorageGpuTest, OutOfDeviceMemoryNamesSizeAndDevice) {
  // 64 TiB: more than any GPU has, less than kStorageMaxBytes, so cudaMalloc really fails.
  const size_t bytes = size_t{1} << 46;
  EXPECT_THAT(storage_->Alloc(bytes, Context::GPU(0)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(std::to_string(bytes) + " bytes on gpu(0)"),
                             HasSubstr("cudaMalloc"))));
  // The device stays usable afterwards.
  absl::StatusOr<StorageHandle> small = storage_->Alloc(4096, Context::GPU(0));
  ASSERT_THAT(small, IsOk());
  storage_->DirectFree(*small);
}

}  // namespace
}  // namespace tessera::engine
