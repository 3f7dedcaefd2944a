// Invariant checks inside fuzz targets: what must hold for every input that parsed (a round
// trip succeeds, a re-encoding is stable). A violation prints what failed and aborts, so
// libFuzzer keeps the input as a crash and the regression test fails. Bad input itself is
// never a violation: the parsers answer it with a status.
#ifndef TESSERA_FUZZ_REQUIRE_H_
#define TESSERA_FUZZ_REQUIRE_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"

namespace tessera::fuzz {

inline void Require(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

inline void RequireOk(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz invariant violated: %s: %s\n", what, status.ToString().c_str());
    std::abort();
  }
}

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_REQUIRE_H_
