#include "kvstore/internal/comm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "ndarray/arithmetic.h"
#include "ndarray/math.h"

#if TESSERA_USE_CUDA
#include "ndarray/cuda/device_math.h"
#endif

namespace tessera::kvstore::internal {

using engine::FnProperty;
using engine::RunContext;

absl::Status Copy(const NDArray& from, const NDArray& to, int priority) {
  return CopyFromTo(from, to, priority);
}

absl::Status SumInto(absl::Span<const NDArray> in, const NDArray& out, int priority) {
  std::vector<engine::VarHandle> reads;
  std::vector<TBlob> blobs;
  for (const NDArray& a : in) {
    reads.push_back(a.var());
    blobs.push_back(a.data());
  }
  const TBlob o = out.data();
  if (out.ctx().is_gpu()) {
#if TESSERA_USE_CUDA
    return out.runtime().engine->PushSync(
        [blobs, o](RunContext rctx) -> absl::Status {
          const cudaStream_t stream = rctx.get_stream<cudaStream_t>();
          RETURN_IF_ERROR(gpu_math::Copy(blobs[0], OpReqType::kWriteTo, o, stream));
          for (size_t i = 1; i < blobs.size(); ++i) {
            RETURN_IF_ERROR(gpu_math::BroadcastBinary(math::BinaryOp::kAdd, o, blobs[i],
                                                      OpReqType::kWriteInplace, o, stream));
          }
          return absl::OkStatus();
        },
        out.ctx(), reads, {out.var()}, FnProperty::kNormal, priority, "kvstore_reduce");
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "kvstore_reduce: sum on ", out.ctx().ToString(), " but Tessera was built without CUDA"));
#endif
  }
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
