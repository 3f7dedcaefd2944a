// Early-return helpers for absl::Status / absl::StatusOr.
//
// Debian's Abseil (20220623) ships no status_macros.h, so Tessera defines the two it needs
// here, once. Both evaluate their argument exactly once.
#ifndef TESSERA_CORE_STATUS_MACROS_H_
#define TESSERA_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TESSERA_STATUS_CONCAT_INNER_(a, b) a##b
#define TESSERA_STATUS_CONCAT_(a, b) TESSERA_STATUS_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` from the enclosing function if not ok.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status tessera_status_ = (expr);           \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): `lhs = *expr` if ok, else returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_STATUS_CONCAT_(tessera_statusor_, __LINE__), lhs, expr)

#define TESSERA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // TESSERA_CORE_STATUS_MACROS_H_
