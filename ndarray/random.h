// Random fills of NDArrays from the per-device Philox generators of the ResourceManager.
//
// Each call pushes one function that mutates the array and the device generator's
// variable (runtime().resources->Request(ctx, {kRandom})), so fills on one device draw
// from a single stream in push order: with the same seed (OwnedRuntime::Create(seed) or
// ResourceManager::SeedRandom) the same sequence of calls gives the same numbers, on any
// engine. Elements are drawn in row-major order; the generator advances by a fixed amount
// per element (1 output for float32 uniforms, 2 for float64, 4 for normals).
//
// Floating-point arrays only (INVALID_ARGUMENT otherwise). GPU arrays are filled on the
// host and copied (no device kernel yet). Thread safety: as NDArray.
#ifndef TESSERA_NDARRAY_RANDOM_H_
#define TESSERA_NDARRAY_RANDOM_H_

#include "absl/status/status.h"
#include "ndarray/ndarray.h"

namespace tessera {

// Every element uniform in [low, high); INVALID_ARGUMENT unless low < high (and finite).
absl::Status SampleUniform(double low, double high, const NDArray& out);
// Every element normal with `mean` and standard deviation `std` >= 0.
absl::Status SampleNormal(double mean, double std, const NDArray& out);

}  // namespace tessera

#endif  // TESSERA_NDARRAY_RANDOM_H_
