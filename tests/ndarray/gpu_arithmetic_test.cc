// NDArray on the GPU: arithmetic with broadcasting, scalars, in-place updates (incl. an
// overlapping rhs), reductions (small, and large enough to be split across blocks), fills and
// casts over every dtype, copies between cpu, cpu_pinned and gpu, and random fills, each
// against the same operation on the CPU. Every case skips without a usable GPU; the last test
// runs everywhere and checks what a GPU array without a GPU gives.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "engine/philox.h"
#include "engine/resource.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "ndarray/ndarray.h"
#include "ndarray/random.h"
#include "tests/gpu_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;

const Context kGpu = Context::GPU(0);
const Context kCpu = Context::CPU();

class GpuArithmeticTest : public testing::EngineTest {
 protected:
  // `values` as an array of `shape` on `ctx`.
  NDArray Make(const Shape& shape, const std::vector<float>& values, Context ctx) {
    absl::StatusOr<NDArray> cpu = FromVector<float>(rt(), shape, values);
    EXPECT_THAT(cpu, IsOk());
    if (ctx == kCpu) return *cpu;
    absl::StatusOr<NDArray> moved = CopyTo(*cpu, ctx);
    EXPECT_THAT(moved, IsOk());
    return *moved;
  }
  // Deterministic, sign-varying values away from zero (division, pow).
  static std::vector<float> Values(int64_t n, float offset = 0) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = 0.5f + 0.25f * static_cast<float>((i * 7 + 3) % 11) + offset;
    return v;
  }
  static std::vector<float> Host(const absl::StatusOr<NDArray>& a) {
    EXPECT_THAT(a, IsOk());
    if (!a.ok()) return {};
    absl::StatusOr<NDArray> cpu = CopyTo(*a, kCpu);
    EXPECT_THAT(cpu, IsOk());
    absl::StatusOr<std::vector<float>> v = cpu->AsVector<float>();
    EXPECT_THAT(v, IsOk());
    return v.ok() ? *v : std::vector<float>{};
  }
  static void ExpectNear(const std::vector<float>& gpu, const std::vector<float>& cpu,
                         double rtol, const std::string& what) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    int reported = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
      // (Equal infinities too: their difference is NaN.)
      const bool ok = gpu[i] == cpu[i] || (std::isnan(gpu[i]) && std::isnan(cpu[i])) ||
                      std::abs(gpu[i] - cpu[i]) <= 1e-6 + rtol * std::abs(cpu[i]);
      if (!ok && reported++ < 5) {
        ADD_FAILURE() << what << ": element " << i << " is " << gpu[i] << " on the GPU, "
                      << cpu[i] << " on the CPU";
      }
    }
  }
};
TESSERA_INSTANTIATE_ENGINES(GpuArithmeticTest);

TEST_P(GpuArithmeticTest, BinaryWithBroadcastingMatchesTheCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  struct Case {
    Shape lhs, rhs;
  };
  for (const Case& c : {Case{{4, 5}, {4, 5}}, Case{{4, 5}, {5}}, Case{{4, 1, 3}, {1, 6, 1}},
                        Case{{1}, {3, 2}}, Case{{2, 3, 4, 5}, {3, 1, 5}}}) {
    const std::vector<float> l = Values(c.lhs.Size()), r = Values(c.rhs.Size(), 0.1f);
    NDArray lc = Make(c.lhs, l, kCpu), rc = Make(c.rhs, r, kCpu);
    NDArray lg = Make(c.lhs, l, kGpu), rg = Make(c.rhs, r, kGpu);
    const std::string what = c.lhs.ToString() + " op " + c.rhs.ToString();
    ExpectNear(Host(lg + rg), Host(lc + rc), 1e-6, what + " +");
    ExpectNear(Host(lg - rg), Host(lc - rc), 1e-6, what + " -");
    ExpectNear(Host(lg * rg), Host(lc * rc), 1e-6, what + " *");
    ExpectNear(Host(lg / rg), Host(lc / rc), 1e-6, what + " /");
  }
}

TEST_P(GpuArithmeticTest, ScalarsOnBothSidesMatchTheCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<float> v = Values(37);
  NDArray c = Make({37}, v, kCpu), g = Make({37}, v, kGpu);
  ExpectNear(Host(g + 1.5), Host(c + 1.5), 1e-6, "x + s");
  ExpectNear(Host(2.0 - g), Host(2.0 - c), 1e-6, "s - x");
  ExpectNear(Host(g - 2.0), Host(c - 2.0), 1e-6, "x - s");
  ExpectNear(Host(g * -3.0), Host(c * -3.0), 1e-6, "x * s");
  ExpectNear(Host(3.0 / g), Host(3.0 / c), 1e-6, "s / x");
  ExpectNear(Host(g / 4.0), Host(c / 4.0), 1e-6, "x / s");
}

TEST_P(GpuArithmeticTest, InPlaceUpdatesIncludingAnOverlappingRhs) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<float> v = Values(12), w = Values(4, 0.2f);
  NDArray c = Make({3, 4}, v, kCpu), g = Make({3, 4}, v, kGpu);
  NDArray rc = Make({4}, w, kCpu), rg = Make({4}, w, kGpu);
  ASSERT_THAT(c += rc, IsOk());
  ASSERT_THAT(g += rg, IsOk());
  ASSERT_THAT(c *= 0.5, IsOk());
  ASSERT_THAT(g *= 0.5, IsOk());
  ExpectNear(Host(g), Host(c), 1e-6, "+= row, *= scalar");
  // Row 0 of the matrix broadcast over the whole matrix it belongs to: read everything first.
  absl::StatusOr<NDArray> row_c = c.Slice(0, 1), row_g = g.Slice(0, 1);
  ASSERT_THAT(row_c, IsOk());
  ASSERT_THAT(row_g, IsOk());
  ASSERT_THAT(c -= *row_c, IsOk());
  ASSERT_THAT(g -= *row_g, IsOk());
  ExpectNear(Host(g), Host(c), 1e-6, "-= own first row");
}

TEST_P(GpuArithmeticTest, ReductionsMatchTheCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    std::vector<int> axes;
  };
  // The last two have few outputs over many elements: the split (two-pass) reduction.
  for (const Case& c : {Case{{4, 5}, {1}}, Case{{4, 5}, {0}}, Case{{2, 3, 4}, {0, 2}},
                        Case{{3, 4}, {}}, Case{{1 << 20}, {}}, Case{{3, 200000}, {1}}}) {
    const std::vector<float> v = Values(c.shape.Size());
    NDArray a = Make(c.shape, v, kCpu), b = Make(c.shape, v, kGpu);
    const std::string what = c.shape.ToString() + " axes " + std::to_string(c.axes.size());
    // Sums of up to 2^20 terms in float: different orders differ by ~1e-6 relative.
    ExpectNear(Host(Sum(b, c.axes)), Host(Sum(a, c.axes)), 2e-5, what + " sum");
    ExpectNear(Host(Mean(b, c.axes)), Host(Mean(a, c.axes)), 2e-5, what + " mean");
    ExpectNear(Host(Max(b, c.axes)), Host(Max(a, c.axes)), 0, what + " max");
  }
}

TEST_P(GpuArithmeticTest, FillsAndCastsOverEveryDtype) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                  DType::kUInt8, DType::kInt8, DType::kInt32, DType::kInt64}) {
    for (double value : std::vector<double>{0.0, 3.0, -2.5, 1e10, NAN}) {
      absl::StatusOr<NDArray> g = Full(rt(), {33}, value, kGpu, t);
      absl::StatusOr<NDArray> c = Full(rt(), {33}, value, kCpu, t);
      ASSERT_THAT(g, IsOk());
      ASSERT_THAT(c, IsOk());
      // Compare through float32 on the CPU: the casts of each device are checked against the
      // CPU's Cast of the CPU fill.
      ExpectNear(Host(Cast(*g, DType::kFloat32)), Host(Cast(*c, DType::kFloat32)), 0,
                 std::string(DTypeName(t)) + " fill " + std::to_string(value));
    }
  }
  const std::vector<float> v = {-300.7f, -1.5f, -0.4f, 0.4f, 1.5f, 2.5f, 127.9f, 300.2f, NAN};
  NDArray c = Make({9}, v, kCpu), g = Make({9}, v, kGpu);
  for (DType t : {DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kUInt8,
                  DType::kInt8, DType::kInt32, DType::kInt64}) {
    ExpectNear(Host(Cast(*Cast(g, t), DType::kFloat32)), Host(Cast(*Cast(c, t), DType::kFloat32)),
               0, std::string("cast through ") + DTypeName(t));
  }
}

TEST_P(GpuArithmeticTest, CopiesBetweenCpuPinnedAndGpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  const std::vector<float> v = Values(1000);
  NDArray c = Make({10, 100}, v, kCpu);
  absl::StatusOr<NDArray> pinned = CopyTo(c, Context::CPUPinned(0));
  ASSERT_THAT(pinned, IsOk());
  absl::StatusOr<NDArray> g = CopyTo(*pinned, kGpu);
  ASSERT_THAT(g, IsOk());
  absl::StatusOr<NDArray> g2 = CopyTo(*g, kGpu);
  ASSERT_THAT(g2, IsOk());
  absl::StatusOr<NDArray> back = CopyTo(*g2, Context::CPUPinned(0));
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(Host(*back), v);
}

TEST_P(GpuArithmeticTest, RandomFillsDrawTheCpuAlgorithmsNumbers) {
  TESSERA_SKIP_WITHOUT_GPU();
  ASSERT_THAT(rt().resources->SeedRandom(7), IsOk());
  constexpr int kN = 1001;  // not a multiple of the Philox block of 4
  absl::StatusOr<NDArray> u = NDArray::Empty(rt(), {kN}, kGpu, DType::kFloat32);
  absl::StatusOr<NDArray> n = NDArray::Empty(rt(), {kN}, kGpu, DType::kFloat32);
  ASSERT_THAT(u, IsOk());
  ASSERT_THAT(n, IsOk());
  ASSERT_THAT(SampleUniform(-2, 3, *u), IsOk());
  ASSERT_THAT(SampleNormal(1, 2, *n), IsOk());
  // The CPU algorithm (ndarray/random.cc) on the GPU's stream: uniform takes one output per
  // float, normal four, the second fill starting where the first ended.
  engine::PhiloxRandom gen(7, engine::RandomSubsequence(kGpu));
  std::vector<float> want_u(kN), want_n(kN);
  for (float& x : want_u) {
    x = static_cast<float>(-2.0 + 5.0 * static_cast<double>(gen.NextUniform()));
    if (x >= 3.0f) x = -2.0f;
  }
  for (float& x : want_n) x = static_cast<float>(1.0 + 2.0 * static_cast<double>(gen.NextGaussian()));
  EXPECT_EQ(Host(*u), want_u);
  // log and cos of the device's libm may differ from glibc's in the last bit.
  ExpectNear(Host(*n), want_n, 1e-5, "normal");
}

TEST_P(GpuArithmeticTest, IntegerArithmeticOnTheGpuIsAClearError) {
  TESSERA_SKIP_WITHOUT_GPU();
  absl::StatusOr<NDArray> a = Full(rt(), {4}, 1, kGpu, DType::kInt32);
  ASSERT_THAT(a, IsOk());
  absl::StatusOr<NDArray> b = *a + *a;
  // Pushed, then failed in the kernel's checks: the error surfaces at the wait.
  absl::Status status = b.ok() ? b->WaitToRead() : b.status();
  EXPECT_THAT(status, testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("int32 has no GPU kernel")));
}

TEST_P(GpuArithmeticTest, GpuArrayWithoutAGpuIsAClearError) {
  if (testing::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present; the tests above cover it";
  absl::StatusOr<NDArray> a = NDArray::Empty(rt(), {4}, kGpu, DType::kFloat32);
  EXPECT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("gpu(0)"));
}

}  // namespace
}  // namespace tessera
