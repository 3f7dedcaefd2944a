#include "kvstore/internal/comm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "ndarray/arithmetic.h"
#include "ndarray/math.h"

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
