// The oneDNN helpers: DNNL_RETURN_IF_ERROR turns a thrown dnnl::error into a Status naming
// the call, file and line; CallBuffers writes in place, stages add-to results in temp
// space and adds them, drops null-op outputs, and fails cleanly without temp space;
// CheckCpu rejects other devices.
#include "ops/nn/dnnl_util.h"

#include <stdexcept>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/runtime.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Status BadPrimitive() {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  // A 2-D source for a convolution: oneDNN rejects it by throwing.
  const dnnl::memory::desc src = PlainDesc(dnnl::memory::dims{2, 3});
  DNNL_RETURN_IF_ERROR(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu,
                                  src),
      eng));
  DNNL_RETURN_IF_ERROR(dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                       dnnl::algorithm::convolution_direct, src,
                                                       src, src, {1, 1}, {0, 0}, {0, 0}));
  return absl::OkStatus();
}

absl::Status Throws() {
  DNNL_RETURN_IF_ERROR(throw std::runtime_error("boom"));
  return absl::OkStatus();
}

TEST(DnnlUtilTest, MacroNamesCallFileAndLine) {
  EXPECT_THAT(BadPrimitive(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("oneDNN error"), HasSubstr("convolution_forward::desc"),
                             HasSubstr("dnnl_util_test.cc:"))));
  EXPECT_THAT(Throws(), StatusIs(absl::StatusCode::kInternal,
                                 AllOf(HasSubstr("boom"), HasSubstr("dnnl_util_test.cc:"))));
}

TEST(DnnlUtilTest, CallBuffersHonourEveryReq) {
  auto runtime = OwnedRuntime::Create();
  ASSERT_THAT(runtime, IsOk());
  auto temp = (*runtime)->get().resources->Request(Context::CPU(), ResourceRequest{});
  ASSERT_THAT(temp, IsOk());
  OpContext ctx;
  ctx.requested = {*temp};

  std::vector<float> write(4, -1), add(4, 10), null(4, 7);
  CallBuffers buf;
  const int w = buf.Output(TBlob(write.data(), Shape{4}), OpReqType::kWriteTo);
  const int a = buf.Output(TBlob(add.data(), Shape{4}), OpReqType::kAddTo);
  const int n = buf.Output(TBlob(null.data(), Shape{4}), OpReqType::kNullOp);
  const int s = buf.Scratch(100);
  ASSERT_THAT(buf.Allocate(ctx), IsOk());
  EXPECT_EQ(buf.ptr(w), write.data());
  EXPECT_NE(buf.ptr(a), add.data());
  EXPECT_NE(buf.ptr(n), null.data());
  EXPECT_NE(buf.ptr(s), nullptr);
  for (int i = 0; i < 4; ++i) {
    buf.fptr(w)[i] = i;
    buf.fptr(a)[i] = i;
    buf.fptr(n)[i] = i;
  }
  buf.Finish();
  EXPECT_THAT(write, ::testing::ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(add, ::testing::ElementsAre(10, 11, 12, 13));
  EXPECT_THAT(null, ::testing::Each(7));
}

TEST(DnnlUtilTest, CallBuffersNeedTempSpace) {
  std::vector<float> out(4);
  CallBuffers buf;
  buf.Output(TBlob(out.data(), Shape{4}), OpReqType::kAddTo);
  EXPECT_THAT(buf.Allocate(OpContext{}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("kTempSpace")));
  CallBuffers none;
  none.Output(TBlob(out.data(), Shape{4}), OpReqType::kWriteTo);
  EXPECT_THAT(none.Allocate(OpContext{}), IsOk());
}

TEST(DnnlUtilTest, MemoryBoundThreadsGrowWithTheTensorsUpToTheCallsThreads) {
  OpContext ctx;
  ctx.run_ctx.cpu_threads = 4;
  EXPECT_EQ(MemoryBoundThreads(ctx, 1000), 1);
  EXPECT_EQ(MemoryBoundThreads(ctx, 200'000), 2);  // 2.4 MB in three passes
  EXPECT_EQ(MemoryBoundThreads(ctx, 10'000'000), 4);
  ctx.run_ctx.cpu_threads = 1;
  EXPECT_EQ(MemoryBoundThreads(ctx, 10'000'000), 1);
}

TEST(DnnlUtilTest, GpuNeedsTheCudaKernels) {
  auto prop = OpRegistry::Global().Create("Activation", {{"act_type", "relu"}});
  ASSERT_THAT(prop, IsOk());
  EXPECT_THAT((*prop)->CreateOperator(Context::GPU(0)),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("Activation"), HasSubstr("gpu(0)"))));
  EXPECT_THAT((*prop)->CreateOperator(Context::CPU()), IsOk());
}

}  // namespace
}  // namespace tessera::ops::nn
