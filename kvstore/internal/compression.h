// How compressed values travel between workers and parameter servers (proto/kvstore.proto
// GradientCompression), the one place that knows each type.
//
// Pushes: "2bit" (MXNet's, two_bit.h) and "fp16" (each value as IEEE half precision). Both
// keep what a push did not carry in a residual on the worker (error feedback): 2bit the part
// below the threshold, fp16 the rounding, so nothing is lost, only delayed. The servers turn
// a push back into float32 values and sum those.
//
// Pulls: with pull_type "bf16" a server sends each value of a pull's answer (the weights its
// optimizer keeps, or the round's sum) rounded to nearest-even bfloat16, half the bytes of
// float32; the worker widens them again. No residual: every pull rounds the server's exact
// float32 value afresh, so the rounding never accumulates (the weights' float32 master copy
// stays on the server, as mixed precision keeps it beside the 16-bit compute). bfloat16 has
// float32's range, so no weight overflows. Shared memory carries the same rounded values, so
// what a worker computes with does not depend on where its server runs.
#ifndef TESSERA_KVSTORE_INTERNAL_COMPRESSION_H_
#define TESSERA_KVSTORE_INTERNAL_COMPRESSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore::internal {

// A compression the servers and workers run: push type none, "2bit" with a positive finite
// threshold, or "fp16" (no threshold), and pull type none or "bf16". INVALID_ARGUMENT saying
// what is wrong otherwise; `field` (if given) gets the field at fault: "type", "threshold"
// or "pull_type".
absl::Status CheckCompression(const GradientCompression& c, std::string* field = nullptr);

// "uncompressed", "2bit (threshold 0.5)", "fp16", each followed by " with bf16 pulls" when
// the pulls are compressed: for messages.
std::string DescribeCompression(const GradientCompression& c);

// ---- Pushes (c.type() not empty) ----

// The bytes of a push of `n` values compressed as `c` says (c checked).
uint64_t CompressedBytes(const GradientCompression& c, int64_t n);

// residual += grad, then `out` (CompressedBytes) gets what the push carries, which is taken
// off the residual.
void CompressPush(const GradientCompression& c, const float* grad, float* residual, int64_t n,
                  char* out);

// The `n` values a compressed push `in` (CompressedBytes) carries.
void DecompressPush(const GradientCompression& c, const char* in, int64_t n, float* out);

// ---- Pulls ----

// Whether the servers answer pulls in bfloat16 (pull_type "bf16").
bool PullsInBFloat16(const GradientCompression& c);

// `n` float32 values as bfloat16 bytes (2 per value) in `out`.
void PackPull(const float* values, int64_t n, char* out);

// The `n` values packed at `in`, widened to float32.
void UnpackPull(const char* in, int64_t n, float* out);

// The float32 values the worker gets from PackPull then UnpackPull, without the bytes in
// between (a reply in shared memory). `in` and `out` may be the same.
void RoundPull(const float* in, int64_t n, float* out);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_COMPRESSION_H_
