// NcclCommunicator: the device lists it refuses (everywhere), and on a GPU the sum over its
// ranks for several dtypes, in place and not, grouped items, and mismatched blobs. A machine
// with one GPU runs every rank-1 case; the two-rank sum needs two GPUs (NCCL refuses two ranks
// on one device) and skips otherwise. Only built with CUDA.
#include "kvstore/internal/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu_test_util.h"

namespace tessera::kvstore::internal {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

TEST(NcclCommunicatorTest, RefusesBadDeviceLists) {
  EXPECT_THAT(NcclCommunicator::Create({}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no devices")));
  EXPECT_THAT(NcclCommunicator::Create({0, 1, 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears twice")));
  const int count = GpuCount();
  EXPECT_THAT(NcclCommunicator::Create({count}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(count == 0 ? "gpu" : "does not exist")));
}

// Device memory holding `values` as T, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(int device, const std::vector<T>& values) : device_(device), n_(values.size()) {
    cudaSetDevice(device);
    EXPECT_EQ(cudaMalloc(&ptr_, n_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  TBlob blob() const {
    return TBlob(ptr_, Shape{static_cast<int64_t>(n_)}, DTypeOf<T>(), Context::GPU(device_));
  }
  std::vector<T> Get() const {
    std::vector<T> out(n_);
    cudaSetDevice(device_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  int device_;
  size_t n_;
  void* ptr_ = nullptr;
};

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_GPU();
    cudaSetDevice(0);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclGpuTest, OneRankSumIsTheInputForEveryDtypeInPlaceOrNot) {
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create({0});
  ASSERT_THAT(comm.status(), IsOk());
  DeviceArray<float> f(0, {1.5f, -2, 3}), f_out(0, {0, 0, 0});
  DeviceArray<int32_t> i(0, {7, -8}), i_out(0, {0, 0});
  DeviceArray<double> d(0, {0.25});
  // Two items in one group, and a third in place.
  const std::vector<std::vector<TBlob>> send = {{f.blob()}, {i.blob()}, {d.blob()}};
  const std::vector<std::vector<TBlob>> recv = {{f_out.blob()}, {i_out.blob()}, {d.blob()}};
  ASSERT_THAT((*comm)->AllReduceSum(send, recv, stream_), IsOk());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(f_out.Get(), (std::vector<float>{1.5f, -2, 3}));
  EXPECT_EQ(i_out.Get(), (std::vector<int32_t>{7, -8}));
  EXPECT_EQ(d.Get(), (std::vector<double>{0.25}));
}

TEST_F(NcclGpuTest, MismatchedBlobsAreRefusedBeforeAnythingRuns) {
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create({0});
  ASSERT_THAT(comm.status(), IsOk());
  DeviceArray<float> a(0, {1, 2, 3}), b(0, {0, 0});
  const std::vector<std::vector<TBlob>> send = {{a.blob()}}, short_recv = {{b.blob()}};
  EXPECT_THAT((*comm)->AllReduceSum(send, short_recv, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0")));
  const std::vector<std::vector<TBlob>> two_ranks = {{a.blob(), a.blob()}};
  EXPECT_THAT((*comm)->AllReduceSum(two_ranks, two_ranks, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("for 1 devices")));
  EXPECT_EQ(b.Get(), (std::vector<float>{0, 0}));
}

TEST_F(NcclGpuTest, TwoRanksSumAcrossGpus) {
  if (GpuCount() < 2) GTEST_SKIP() << "needs two GPUs (NCCL takes one rank per GPU)";
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create({0, 1});
  ASSERT_THAT(comm.status(), IsOk());
  DeviceArray<float> a(0, {1, 2}), b(1, {10, 20});
  const std::vector<std::vector<TBlob>> both = {{a.blob(), b.blob()}};
  ASSERT_THAT((*comm)->AllReduceSum(both, both, stream_), IsOk());
  EXPECT_EQ(a.Get(), (std::vector<float>{11, 22}));
  EXPECT_EQ(b.Get(), (std::vector<float>{11, 22}));
}

}  // namespace
}  // namespace tessera::kvstore::internal
