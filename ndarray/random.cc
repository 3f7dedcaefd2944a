#include "ndarray/random.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "engine/philox.h"
#include "engine/resource.h"

#if TESSERA_USE_CUDA
#include "ndarray/cuda/device_math.h"
#endif

namespace tessera {
namespace {

enum class Distribution { kUniform, kNormal };

template <typename T>
void Draw(Distribution dist, double a, double b, engine::PhiloxRandom* gen, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (dist == Distribution::kNormal) {
      v = a + b * static_cast<double>(gen->NextGaussian());
    } else if (std::is_same_v<T, double>) {
      v = a + (b - a) * gen->NextUniformDouble();
    } else {
      v = a + (b - a) * static_cast<double>(gen->NextUniform());
    }
    T t = static_cast<T>(static_cast<AccType<T>>(v));
    // Rounding to a narrower type can land exactly on `high`; keep the interval half-open.
    if (dist == Distribution::kUniform && static_cast<double>(static_cast<AccType<T>>(t)) >= b) {
      t = static_cast<T>(static_cast<AccType<T>>(a));
    }
    out[i] = t;
  }
}

absl::Status Sample(const char* name, Distribution dist, double a, double b, const NDArray& out) {
  if (out.is_none()) return absl::InvalidArgumentError(absl::StrCat(name, ": a none array"));
  if (!IsFloatingPoint(out.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": needs a floating-point array, got ",
                                                   DTypeName(out.dtype()), " ",
                                                   out.shape().ToString()));
  }
  const Runtime& rt = out.runtime();
  if (rt.resources == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": runtime without resources"));
  }
  ASSIGN_OR_RETURN(engine::Resource res,
                   rt.resources->Request(out.ctx(), {engine::ResourceRequest::kRandom}));
  const TBlob blob = out.data();
  auto fn = [dist, a, b, blob, res](engine::RunContext rctx) -> absl::Status {
    engine::PhiloxRandom* gen = res.get_random();
    if (!blob.ctx.is_gpu()) {
      TESSERA_FLOAT_TYPE_SWITCH(blob.dtype, DT,
                                Draw<DT>(dist, a, b, gen, static_cast<DT*>(blob.dptr), blob.Size()),
                                return absl::InternalError("random fill: unexpected dtype"));
      return absl::OkStatus();
    }
#if TESSERA_USE_CUDA
    // The same draws, made on the device from the generator's current position.
    return gpu_math::Sample(dist == Distribution::kNormal ? gpu_math::Distribution::kNormal
                                                          : gpu_math::Distribution::kUniform,
                            a, b, gen, blob, rctx.get_stream<cudaStream_t>());
#else
    (void)rctx;
    return absl::FailedPreconditionError("random fill: GPU array without CUDA");
#endif
  };
  return rt.engine->PushSync(fn, out.ctx(), {}, {out.var(), res.var}, engine::FnProperty::kNormal,
                             0, name);
}

}  // namespace

absl::Status SampleUniform(double low, double high, const NDArray& out) {
  if (!(low < high) || !std::isfinite(low) || !std::isfinite(high)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleUniform: needs finite low < high, got [", low, ", ", high, ")"));
  }
  return Sample("SampleUniform", Distribution::kUniform, low, high, out);
}

absl::Status SampleNormal(double mean, double std, const NDArray& out) {
  if (!(std >= 0) || !std::isfinite(std) || !std::isfinite(mean)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SampleNormal: needs a finite mean and std >= 0, got mean ", mean, ", std ", std));
  }
  return Sample("SampleNormal", Distribution::kNormal, mean, std, out);
}

}  // namespace tessera
