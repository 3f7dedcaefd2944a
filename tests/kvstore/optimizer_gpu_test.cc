// The optimizers' GPU kernels against their CPU kernels: the same updates of cpu(0) and
// gpu(0) weights, from the same initial values and gradients, for every optimizer and
// option, must give the same weights and states; optimizer state saved from one device
// continues on the other. The GPU tests skip with a one-line reason when no GPU is usable.
// One test runs everywhere: a GPU weight this process cannot update fails with
// FAILED_PRECONDITION and counts nothing.
//
// Tolerance: |gpu - cpu| <= 1e-6 + 1e-5 * |cpu| per element after four steps. The kernels
// round every operation on its own, in the CPU loops' order, so they should agree bit for bit
// (the test logs how many elements did); the tolerance leaves room for a CPU build that
// contracts into FMAs (-march=native), which drifts by a few ulps per step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "engine/storage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "ndarray/serialization.h"
#include "tests/ndarray/test_util.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Whether a GPU is usable (the pattern of tests/ops/cuda/gpu_checker.cc) ----

#if TESSERA_USE_CUDA
std::string NoGpuReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(err));
  }
  if (count == 0) return "cudaGetDeviceCount returned 0";
  return "";
}
int VisibleGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}
#else
std::string NoGpuReason() { return "built without CUDA (configure with --config=cuda)"; }
int VisibleGpus() { return 0; }
#endif

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    const std::string no_gpu = NoGpuReason();                          \
    if (!no_gpu.empty()) GTEST_SKIP() << "no CUDA device: " << no_gpu; \
  } while (false)

// ---- Optimizer state, read back through its documented format (optimizer.h) ----

struct SavedSlot {
  int32_t index = 0;
  int32_t device_type = 0;
  int32_t device_id = 0;
  int64_t count = 0;
  uint32_t states = 0;
  size_t device_offset = 0;  // where device_type sits in the bytes
};

struct SavedState {
  std::vector<SavedSlot> slots;
  std::vector<std::vector<float>> arrays;  // every slot's states, in slot order
};

class Cursor {
 public:
  explicit Cursor(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T Get() {
    T v{};
    if (pos_ + sizeof(T) <= bytes_.size()) std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    Skip(sizeof(T));
    return v;
  }
  void Skip(size_t n) {
    pos_ += n;
    ok_ = ok_ && pos_ <= bytes_.size();
  }
  size_t pos() const { return pos_; }
  bool ok() const { return ok_; }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

absl::StatusOr<SavedState> ParseState(const Runtime& rt, const std::string& bytes) {
  Cursor c(bytes);
  c.Skip(8 + 4);                 // magic, version
  c.Skip(c.Get<uint32_t>());     // optimizer name
  c.Skip(8 + 8);                 // learning rate, num_update
  if (c.Get<uint32_t>() != 0) {  // a scheduler: name, then n float64
    c.Skip(c.Get<uint32_t>());
    c.Skip(8 * size_t{c.Get<uint32_t>()});
  }
  SavedState out;
  const uint32_t slots = c.Get<uint32_t>();
  for (uint32_t i = 0; i < slots && c.ok(); ++i) {
    SavedSlot s;
    s.index = c.Get<int32_t>();
    s.device_offset = c.pos();
    s.device_type = c.Get<int32_t>();
    s.device_id = c.Get<int32_t>();
    s.count = c.Get<int64_t>();
    s.states = c.Get<uint32_t>();
    out.slots.push_back(s);
  }
  const uint64_t payload = c.Get<uint64_t>();
  if (!c.ok() || c.pos() + payload != bytes.size()) {
    return absl::DataLossError("test: the optimizer state does not parse");
  }
  absl::StatusOr<ArrayFileContents> arrays =
      DecodeArrays(rt, bytes.substr(c.pos()), "optimizer state");
  if (!arrays.ok()) return arrays.status();
  for (const NDArray& a : arrays->arrays) {
    absl::StatusOr<std::vector<float>> v = a.AsVector<float>();
    if (!v.ok()) return v.status();
    out.arrays.push_back(*std::move(v));
  }
  return out;
}

// `bytes` with every slot moved to `ctx`: the state arrays themselves carry no device, so a
// state saved from one device can continue on another.
std::string OnDevice(const Runtime& rt, std::string bytes, Context ctx) {
  absl::StatusOr<SavedState> state = ParseState(rt, bytes);
  EXPECT_THAT(state, IsOk());
  if (!state.ok()) return bytes;
  for (const SavedSlot& s : state->slots) {
    const int32_t fields[2] = {static_cast<int32_t>(ctx.type), ctx.id};
    std::memcpy(bytes.data() + s.device_offset, fields, sizeof(fields));
  }
  return bytes;
}

// ---- Comparing GPU and CPU values ----

constexpr double kRtol = 1e-5, kAtol = 1e-6;

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0, bitwise = 0, first_bad = 0;
  double max_diff = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(float)) == 0) {
      ++bitwise;
      continue;
    }
    const double diff = std::abs(double{gpu[i]} - double{cpu[i]});
    if (!(diff <= kAtol + kRtol * std::abs(double{cpu[i]}))) {
      if (bad++ == 0) first_bad = i;
    }
    if (diff > max_diff || std::isnan(diff)) max_diff = diff;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size()
                     << " elements differ beyond rtol " << kRtol << " + atol " << kAtol
                     << "; first at " << first_bad << ": gpu " << gpu[first_bad] << ", cpu "
                     << cpu[first_bad] << "; max |diff| " << max_diff;
  if (bitwise != cpu.size()) {
    std::cout << what << ": " << bitwise << " of " << cpu.size()
              << " elements bitwise equal, max |gpu - cpu| = " << max_diff << "\n";
  }
}

// ---- The configurations and the runs ----

struct Config {
  std::string name;
  ops::KwArgs params;
  std::string Label() const {
    std::string label = name;
    for (const auto& [k, v] : params) absl::StrAppend(&label, " ", k, "=", v);
    return label;
  }
};

// Every optimizer plain and with every option: weight decay, rescaling, gradient clipping
// (0.4 after rescaling by 0.5 clips gradients beyond 0.8, many of ours), weight clipping
// (0.9 against initial weights in [-1.5, 1.5]), momentum, centered RMSProp.
std::vector<Config> Configs() {
  const ops::KwArgs all = {{"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.4"}};
  auto with = [&](ops::KwArgs params, bool options) {
    if (options) params.insert(params.end(), all.begin(), all.end());
    return params;
  };
  std::vector<Config> configs;
  for (bool options : {false, true}) {
    configs.push_back({"sgd", with({{"learning_rate", "0.1"}}, options)});
    configs.push_back({"sgd", with({{"learning_rate", "0.1"}, {"momentum", "0.9"}}, options)});
    configs.push_back(
        {"adam",
         with({{"learning_rate", "0.01"}, {"beta1", "0.8"}, {"beta2", "0.9"}, {"epsilon", "1e-6"}},
              options)});
    ops::KwArgs rmsprop = {{"learning_rate", "0.01"}, {"gamma1", "0.8"}, {"epsilon", "1e-6"}};
    if (options) rmsprop.push_back({"clip_weights", "0.9"});
    configs.push_back({"rmsprop", with(rmsprop, options)});
    ops::KwArgs centered = rmsprop;
    centered.push_back({"centered", "true"});
    centered.push_back({"gamma2", "0.7"});
    configs.push_back({"rmsprop", with(centered, options)});
    configs.push_back({"adagrad", with({{"learning_rate", "0.1"}, {"eps", "1e-6"}}, options)});
  }
  return configs;
}

constexpr int kSteps = 4;

// Initial weights and every step's gradients of one size, for parameter indexes 0 and 1.
struct Data {
  int64_t n = 0;
  std::vector<float> w0[2];
  std::vector<std::vector<float>> grads[2];  // [index][step]
};

const Data& DataOf(int64_t n) {
  static auto* cache = new std::map<int64_t, Data>();
  auto it = cache->find(n);
  if (it != cache->end()) return it->second;
  Data d;
  d.n = n;
  std::mt19937 rng(static_cast<uint32_t>(n));
  std::uniform_real_distribution<float> weight(-1.5f, 1.5f), grad(-2.0f, 2.0f);
  for (int index = 0; index < 2; ++index) {
    d.w0[index].resize(n);
    for (float& x : d.w0[index]) x = weight(rng);
    d.grads[index].resize(2 * kSteps);  // the save test runs twice as many steps
    for (std::vector<float>& g : d.grads[index]) {
      g.resize(n);
      for (float& x : g) x = grad(rng);
    }
  }
  return cache->emplace(n, std::move(d)).first->second;
}

// One optimizer updating the weights of indexes 0 and 1 on one device. Index 1 has lr_mult
// 2 and wd_mult 0.5.
struct Training {
  std::unique_ptr<Optimizer> opt;
  std::vector<NDArray> w;
  Context ctx;
};

absl::StatusOr<Training> Start(const Runtime& rt, const Config& c, Context ctx,
                               const std::vector<float> (&w0)[2]) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(c.name, c.params);
  if (!opt.ok()) return opt.status();
  Training run{*std::move(opt), {}, ctx};
  run.opt->SetLrMult({{1, 2.0}});
  run.opt->SetWdMult({{1, 0.5}});
  for (int index = 0; index < 2; ++index) {
    const int64_t n = static_cast<int64_t>(w0[index].size());
    absl::StatusOr<NDArray> w = FromVector<float>(rt, Shape{n}, w0[index], ctx);
    if (!w.ok()) return w.status();
    run.w.push_back(*std::move(w));
  }
  return run;
}

absl::Status Steps(const Runtime& rt, Training& run, const Data& d, int from, int to) {
  for (int step = from; step < to; ++step) {
    for (int index = 0; index < 2; ++index) {
      absl::StatusOr<NDArray> g = FromVector<float>(rt, Shape{d.n}, d.grads[index][step], run.ctx);
      if (!g.ok()) return g.status();
      absl::Status s = run.opt->Update(index, run.w[index], *g);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The weights and states of a GPU and a CPU training must agree; so must their bookkeeping.
void ExpectGpuMatchesCpu(const Runtime& rt, const Training& gpu, const Training& cpu,
                         const std::string& what) {
  for (int index = 0; index < 2; ++index) {
    absl::StatusOr<std::vector<float>> g = gpu.w[index].AsVector<float>();
    absl::StatusOr<std::vector<float>> c = cpu.w[index].AsVector<float>();
    ASSERT_THAT(g, IsOk()) << what;
    ASSERT_THAT(c, IsOk()) << what;
    ExpectClose(*g, *c, absl::StrCat(what, ", weight of index ", index));
  }
  absl::StatusOr<std::string> gpu_bytes = gpu.opt->SaveState();
  absl::StatusOr<std::string> cpu_bytes = cpu.opt->SaveState();
  ASSERT_THAT(gpu_bytes, IsOk()) << what;
  ASSERT_THAT(cpu_bytes, IsOk()) << what;
  absl::StatusOr<SavedState> gs = ParseState(rt, *gpu_bytes);
  absl::StatusOr<SavedState> cs = ParseState(rt, *cpu_bytes);
  ASSERT_THAT(gs, IsOk()) << what;
  ASSERT_THAT(cs, IsOk()) << what;
  ASSERT_EQ(gs->slots.size(), cs->slots.size()) << what;
  for (size_t i = 0; i < gs->slots.size(); ++i) {
    EXPECT_EQ(gs->slots[i].index, cs->slots[i].index) << what;
    EXPECT_EQ(gs->slots[i].device_type, static_cast<int32_t>(DeviceType::kGPU)) << what;
    EXPECT_EQ(gs->slots[i].count, cs->slots[i].count) << what;
    EXPECT_EQ(gs->slots[i].states, cs->slots[i].states) << what;
  }
  ASSERT_EQ(gs->arrays.size(), cs->arrays.size()) << what;
  for (size_t i = 0; i < gs->arrays.size(); ++i) {
    ExpectClose(gs->arrays[i], cs->arrays[i], absl::StrCat(what, ", state array ", i));
  }
  EXPECT_EQ(gpu.opt->num_update(), cpu.opt->num_update()) << what;
  EXPECT_EQ(gpu.opt->update_count(1, gpu.ctx), cpu.opt->update_count(1, cpu.ctx)) << what;
}

class OptimizerGpuTest : public tessera::testing::EngineTest {
 protected:
  // kSteps updates of both indexes of `c` on cpu(0) and on gpu(0), compared.
  void CompareCpuAndGpu(const Config& c, int64_t n) {
    const std::string what = absl::StrCat(c.Label(), ", n=", n);
    SCOPED_TRACE(what);
    const Data& d = DataOf(n);
    absl::StatusOr<Training> cpu = Start(rt(), c, Context::CPU(0), d.w0);
    absl::StatusOr<Training> gpu = Start(rt(), c, Context::GPU(0), d.w0);
    ASSERT_THAT(cpu, IsOk());
    ASSERT_THAT(gpu, IsOk());
    ASSERT_THAT(Steps(rt(), *cpu, d, 0, kSteps), IsOk());
    ASSERT_THAT(Steps(rt(), *gpu, d, 0, kSteps), IsOk());
    ExpectGpuMatchesCpu(rt(), *gpu, *cpu, what);
    EXPECT_EQ(gpu->opt->update_count(0, Context::GPU(0)), kSteps);
    EXPECT_EQ(gpu->opt->update_count(0, Context::CPU(0)), 0);
  }
};
TESSERA_INSTANTIATE_ENGINES(OptimizerGpuTest);

// Sizes around the block size (256) and one large enough for a few hundred blocks.
TEST_P(OptimizerGpuTest, EveryOptimizerAndOptionMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const Config& c : Configs()) {
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{100003}}) {
      CompareCpuAndGpu(c, n);
      if (HasFatalFailure()) return;
    }
  }
}

// More elements than one grid has threads (4096 blocks of 256): each thread updates several,
// through the grid-stride loop. Every kernel once, with every option on.
TEST_P(OptimizerGpuTest, ArraysLargerThanTheGridMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = int64_t{4096} * 256 * 2 + 3;
  for (const Config& c : Configs()) {
    if (c.params.back().first != "clip_gradient") continue;  // only the ones with options
    CompareCpuAndGpu(c, n);
    if (HasFatalFailure()) return;
  }
}

// One optimizer keeps one state per (index, device): updating the same index's copies on the
// CPU and the GPU, as the allreduce stores do, keeps them apart and in agreement.
TEST_P(OptimizerGpuTest, CpuAndGpuCopiesOfOneIndexKeepTheirOwnState) {
  SKIP_WITHOUT_GPU();
  const Data& d = DataOf(1001);
  auto opt = Optimizer::Create("adam", {{"learning_rate", "0.01"}, {"clip_gradient", "0.5"}});
  ASSERT_THAT(opt, IsOk());
  NDArray w[2] = {*FromVector<float>(rt(), Shape{d.n}, d.w0[0], Context::CPU(0)),
                  *FromVector<float>(rt(), Shape{d.n}, d.w0[0], Context::GPU(0))};
  for (int step = 0; step < kSteps; ++step) {
    for (NDArray& weight : w) {
      NDArray g = *FromVector<float>(rt(), Shape{d.n}, d.grads[0][step], weight.ctx());
      ASSERT_THAT((*opt)->Update(0, weight, g), IsOk());
    }
  }
  EXPECT_EQ((*opt)->update_count(0, Context::CPU(0)), kSteps);
  EXPECT_EQ((*opt)->update_count(0, Context::GPU(0)), kSteps);
  EXPECT_EQ((*opt)->num_update(), kSteps);
  ExpectClose(*w[1].AsVector<float>(), *w[0].AsVector<float>(), "adam, cpu and gpu copies");
  absl::StatusOr<SavedState> saved = ParseState(rt(), *(*opt)->SaveState());
  ASSERT_THAT(saved, IsOk());
  ASSERT_EQ(saved->slots.size(), 2u);  // (0, cpu(0)) then (0, gpu(0))
  EXPECT_EQ(saved->slots[1].device_type, static_cast<int32_t>(DeviceType::kGPU));
  ASSERT_EQ(saved->arrays.size(), 4u);
  ExpectClose(saved->arrays[2], saved->arrays[0], "adam mean, cpu and gpu copies");
  ExpectClose(saved->arrays[3], saved->arrays[1], "adam var, cpu and gpu copies");
}

// Three steps, SaveState, a fresh optimizer, LoadState, three more: on the GPU this gives
// exactly the uninterrupted run; moved to the other device, the run continues within the
// tolerance, both ways.
TEST_P(OptimizerGpuTest, StateSavedOnOneDeviceContinuesOnTheOther) {
  SKIP_WITHOUT_GPU();
  const std::vector<Config> configs = {
      {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.001"}}},
      {"adam", {{"learning_rate", "0.01"}, {"clip_gradient", "0.5"}}},
      {"rmsprop", {{"centered", "1"}, {"learning_rate", "0.01"}, {"clip_weights", "0.9"}}},
      {"adagrad", {{"learning_rate", "0.1"}, {"rescale_grad", "0.5"}}}};
  const Data& d = DataOf(1003);
  const Context cpu = Context::CPU(0), gpu = Context::GPU(0);
  for (const Config& c : configs) {
    SCOPED_TRACE(c.Label());
    // Uninterrupted runs, and the state and weights after the first half, on both devices
    // (keyed by device name).
    std::map<std::string, Training> whole;
    std::map<std::string, std::string> saved;
    std::map<std::string, std::vector<float>> half[2];
    for (Context ctx : {cpu, gpu}) {
      const std::string k = ctx.ToString();
      absl::StatusOr<Training> w = Start(rt(), c, ctx, d.w0), f = Start(rt(), c, ctx, d.w0);
      ASSERT_THAT(w, IsOk());
      ASSERT_THAT(f, IsOk());
      ASSERT_THAT(Steps(rt(), *w, d, 0, 2 * kSteps), IsOk());
      ASSERT_THAT(Steps(rt(), *f, d, 0, kSteps), IsOk());
      absl::StatusOr<std::string> bytes = f->opt->SaveState();
      ASSERT_THAT(bytes, IsOk());
      saved[k] = *bytes;
      for (int index = 0; index < 2; ++index) half[index][k] = *f->w[index].AsVector<float>();
      whole.emplace(k, *std::move(w));
    }  // nothing of the first halves survives but the bytes and the weights

    // (from, to): the state saved on `from` continues on `to`.
    for (auto [from, to] : {std::pair{gpu, gpu}, std::pair{gpu, cpu}, std::pair{cpu, gpu}}) {
      const std::string what =
          absl::StrCat(c.Label(), ": saved on ", from.ToString(), ", resumed on ", to.ToString());
      SCOPED_TRACE(what);
      const std::string kf = from.ToString();
      const std::vector<float> w0[2] = {half[0][kf], half[1][kf]};
      absl::StatusOr<Training> resumed = Start(rt(), c, to, w0);
      ASSERT_THAT(resumed, IsOk());
      const std::string bytes = from == to ? saved[kf] : OnDevice(rt(), saved[kf], to);
      ASSERT_THAT(resumed->opt->LoadState(rt(), bytes), IsOk());
      EXPECT_EQ(resumed->opt->num_update(), kSteps);
      EXPECT_EQ(resumed->opt->update_count(1, to), kSteps);
      // The states went into `to`'s memory and come back out unchanged.
      absl::StatusOr<std::string> again = resumed->opt->SaveState();
      ASSERT_THAT(again, IsOk());
      EXPECT_TRUE(*again == bytes) << "SaveState right after LoadState differs";
      ASSERT_THAT(Steps(rt(), *resumed, d, kSteps, 2 * kSteps), IsOk());
      for (int index = 0; index < 2; ++index) {
        const std::vector<float> got = *resumed->w[index].AsVector<float>();
        const std::vector<float> want = *whole.at(kf).w[index].AsVector<float>();
        if (from == to) {
          // Elementwise kernels without atomics: the same inputs give the same bits.
          EXPECT_TRUE(got == want) << what << ": index " << index << " differs from the "
                                   << "uninterrupted run";
        } else if (to.is_gpu()) {
          ExpectClose(got, want, absl::StrCat(what, ", index ", index));
        } else {
          ExpectClose(want, got, absl::StrCat(what, ", index ", index));
        }
      }
    }
  }
}

// ---- Everywhere: a GPU weight this process cannot update ----

// Host memory for every device, gpu(n) included: a "GPU" array can exist here without a GPU,
// and the optimizer and the engine still have to refuse to run anything on it.
class HostBackedAllocator : public engine::DeviceAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(engine::kStorageAlignment, bytes);
    if (p == nullptr) return absl::ResourceExhaustedError("test allocator: out of memory");
    return p;
  }
  void Deallocate(void* ptr, size_t) override { std::free(ptr); }
};

// Without CUDA the optimizer refuses the GPU weight itself; with CUDA, the engine refuses to
// run on a GPU this process does not see (gpu(0) without a GPU, one past the last with
// them). The naive engine, because the threaded one would refuse to free such an array too.
TEST(OptimizerGpuAvailabilityTest, UnusableGpuWeightFailsClearlyAndCountsNothing) {
  engine::EngineOptions engine_options;
  engine_options.kind = engine::EngineOptions::Kind::kNaive;
  engine::StorageOptions storage_options;
  storage_options.allocator_factory =
      [](Context) -> absl::StatusOr<std::unique_ptr<engine::DeviceAllocator>> {
    return std::make_unique<HostBackedAllocator>();
  };
  absl::StatusOr<std::unique_ptr<OwnedRuntime>> owned =
      OwnedRuntime::Create(engine_options, storage_options);
  ASSERT_THAT(owned, IsOk());
  const Runtime& rt = (*owned)->get();
  const Context gpu = Context::GPU(VisibleGpus());
  absl::StatusOr<NDArray> w = NDArray::Empty(rt, Shape{5}, gpu);
  absl::StatusOr<NDArray> g = NDArray::Empty(rt, Shape{5}, gpu);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT(g, IsOk());
  const std::vector<Config> configs = {
      {"sgd", {}},     {"sgd", {{"momentum", "0.9"}}},      {"adam", {}},
      {"rmsprop", {}}, {"rmsprop", {{"centered", "true"}}}, {"adagrad", {}}};
  for (const Config& c : configs) {
    SCOPED_TRACE(c.Label());
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(c.name, c.params);
    ASSERT_THAT(opt, IsOk());
    EXPECT_THAT((*opt)->Update(2, *w, *g), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                    AllOf(HasSubstr(c.name), HasSubstr("index 2"),
                                                          HasSubstr(gpu.ToString()))));
    EXPECT_EQ((*opt)->update_count(2, gpu), 0);
    EXPECT_EQ((*opt)->num_update(), 0);
    absl::StatusOr<std::string> bytes = (*opt)->SaveState();
    ASSERT_THAT(bytes, IsOk());
    absl::StatusOr<SavedState> saved = ParseState(rt, *bytes);
    ASSERT_THAT(saved, IsOk());
    EXPECT_TRUE(saved->slots.empty()) << "a refused update left a state behind";
    // The optimizer stays usable on the CPU.
    NDArray cw = *FromVector<float>(rt, Shape{2}, std::vector<float>{1, 2});
    NDArray cg = *FromVector<float>(rt, Shape{2}, std::vector<float>{0.5f, 0.5f});
    EXPECT_THAT((*opt)->Update(2, cw, cg), IsOk());
    EXPECT_EQ((*opt)->update_count(2, Context::CPU()), 1);
    EXPECT_EQ((*opt)->num_update(), 1);
  }
}

}  // namespace
}  // namespace tessera::kvstore
