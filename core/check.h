// TESSERA_CHECK: aborts on a violated internal invariant (a programmer bug, never bad
// input; bad input gets an absl::Status). Active in every build mode.
#ifndef TESSERA_CORE_CHECK_H_
#define TESSERA_CORE_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define TESSERA_CHECK(cond)                                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (false)

#endif  // TESSERA_CORE_CHECK_H_
