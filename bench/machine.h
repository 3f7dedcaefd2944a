// What a benchmark's figures were measured on, for its JSON line: figures from different
// machines are not comparable, so every bench names the CPU (and its vector ISA).
#ifndef TESSERA_BENCH_MACHINE_H_
#define TESSERA_BENCH_MACHINE_H_

#include <string>

namespace tessera::bench {

// /proc/cpuinfo's model name, or "unknown".
std::string CpuModel();

// The widest x86 vector extension the CPU has: "AVX-512", "AVX2", "AVX", "SSE4.1" or
// "unknown" (oneDNN picks its kernels by the same flags).
std::string CpuIsa();

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_MACHINE_H_
