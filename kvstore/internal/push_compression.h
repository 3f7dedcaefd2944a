// How a compressing worker's pushes travel (proto/kvstore.proto GradientCompression), the one
// place that knows each type: "2bit" (MXNet's, two_bit.h) and "fp16" (each value as IEEE
// half precision). Both keep what a push did not carry in a residual on the worker (error
// feedback): 2bit the part below the threshold, fp16 the rounding, so nothing is lost, only
// delayed. The servers turn a push back into float32 values and sum those.
#ifndef TESSERA_KVSTORE_INTERNAL_PUSH_COMPRESSION_H_
#define TESSERA_KVSTORE_INTERNAL_PUSH_COMPRESSION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore::internal {

// A compression the servers and workers run: type "2bit" with a positive finite threshold,
// or "fp16" (no threshold). INVALID_ARGUMENT saying what is wrong otherwise.
absl::Status CheckCompression(const GradientCompression& c);

// The bytes of a push of `n` values compressed as `c` says (c checked).
uint64_t CompressedBytes(const GradientCompression& c, int64_t n);

// residual += grad, then `out` (CompressedBytes) gets what the push carries, which is taken
// off the residual.
void CompressPush(const GradientCompression& c, const float* grad, float* residual, int64_t n,
                  char* out);

// The `n` values a compressed push `in` (CompressedBytes) carries.
void DecompressPush(const GradientCompression& c, const char* in, int64_t n, float* out);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_PUSH_COMPRESSION_H_
