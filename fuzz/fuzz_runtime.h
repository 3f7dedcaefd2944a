// The Runtime of the fuzz targets that build NDArrays: the naive (synchronous) engine, so an
// input runs on the calling thread and a crash's stack shows the parser, and a CPU pool capped
// at 1 GiB, so a fuzzed shape that passes validation still cannot take the machine's memory.
// Created on first use and kept for the process (targets are called millions of times).
#ifndef TESSERA_FUZZ_FUZZ_RUNTIME_H_
#define TESSERA_FUZZ_FUZZ_RUNTIME_H_

#include "ndarray/runtime.h"

namespace tessera::fuzz {

const Runtime& FuzzRuntime();

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_FUZZ_RUNTIME_H_
