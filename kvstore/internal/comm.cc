#include "kvstore/internal/comm.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "ndarray/math.h"

namespace tessera::kvstore::internal {

using engine::FnProperty;
using engine::RunContext;

absl::Status Copy(const NDArray& from, const NDArray& to, int priority) {
  engine::Engine* eng = from.runtime().engine;
  const TBlob src = from.data(), dst = to.data();
  const size_t bytes = src.Bytes();
  if (OnHost(from) && OnHost(to)) {
    return eng->PushSync(
        [src, dst, bytes](RunContext) {
          if (src.dptr != dst.dptr) std::memmove(dst.dptr, src.dptr, bytes);
          return absl::OkStatus();
        },
        to.ctx(), {from.var()}, {to.var()}, FnProperty::kNormal, priority, "kvstore_copy");
  }
#if TESSERA_USE_CUDA
  // As CopyFromTo (ndarray/arithmetic.cc): the GPU end decides the stream.
  FnProperty prop = FnProperty::kNormal;
  Context run_ctx = to.ctx();
  cudaMemcpyKind kind = cudaMemcpyDefault;
  if (OnHost(from)) {
    prop = FnProperty::kCopyToGPU;
    kind = cudaMemcpyHostToDevice;
  } else if (OnHost(to)) {
    prop = FnProperty::kCopyFromGPU;
    run_ctx = from.ctx();
    kind = cudaMemcpyDeviceToHost;
  }
  return eng->PushSync(
      [src, dst, bytes, kind](RunContext rctx) -> absl::Status {
        if (src.dptr == dst.dptr) return absl::OkStatus();
        CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(dst.dptr, src.dptr, bytes, kind, rctx.get_stream<cudaStream_t>()));
        return absl::OkStatus();
      },
      run_ctx, {from.var()}, {to.var()}, prop, priority, "kvstore_copy");
#else
  return absl::FailedPreconditionError(absl::StrCat("kvstore: copy ", from.ctx().ToString(), " -> ",
                                                    to.ctx().ToString(),
                                                    " needs CUDA, and Tessera was built without"));
#endif
}

absl::Status SumInto(absl::Span<const NDArray> in, const NDArray& out, int priority) {
  std::vector<engine::VarHandle> reads;
  std::vector<TBlob> blobs;
  for (const NDArray& a : in) {
    reads.push_back(a.var());
    blobs.push_back(a.data());
  }
  const TBlob o = out.data();
  return out.runtime().engine->PushSync(
      [blobs, o](RunContext) -> absl::Status {
        RETURN_IF_ERROR(math::Copy(blobs[0], OpReqType::kWriteTo, o));
        for (size_t i = 1; i < blobs.size(); ++i) {
          RETURN_IF_ERROR(math::BroadcastBinary(math::BinaryOp::kAdd, o, blobs[i],
                                                OpReqType::kWriteInplace, o));
        }
        return absl::OkStatus();
      },
      out.ctx(), reads, {out.var()}, FnProperty::kNormal, priority, "kvstore_reduce");
}

}  // namespace tessera::kvstore::internal
