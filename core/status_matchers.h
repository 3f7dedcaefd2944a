// GoogleTest matchers for absl::Status / absl::StatusOr (Debian's Abseil has none).
//
//   EXPECT_THAT(status, IsOk());
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("key 7")));
#ifndef TESSERA_CORE_STATUS_MATCHERS_H_
#define TESSERA_CORE_STATUS_MATCHERS_H_

#include <ostream>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace tessera::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()),
                                       result_listener);
}

// A StatusOr that is OK and whose value matches `value_matcher`.
MATCHER_P(IsOkAndHolds, value_matcher, "") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

MATCHER_P(StatusIs, code, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

}  // namespace tessera::testing

// ASSERT_OK(expr): the test stops unless the Status / StatusOr `expr` is OK.
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::tessera::testing::IsOk())
// ASSERT_OK_AND_ASSIGN(lhs, expr): the test stops unless the StatusOr `expr` is OK; then
// `lhs` (a declaration or an lvalue) takes its value.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  TESSERA_ASSERT_OK_AND_ASSIGN_(TESSERA_MATCHERS_CONCAT_(statusor_, __LINE__), lhs, expr)
#define TESSERA_ASSERT_OK_AND_ASSIGN_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  ASSERT_THAT(statusor, ::tessera::testing::IsOk());       \
  lhs = std::move(statusor).value()
#define TESSERA_MATCHERS_CONCAT_(a, b) TESSERA_MATCHERS_CONCAT_INNER_(a, b)
#define TESSERA_MATCHERS_CONCAT_INNER_(a, b) a##b

#endif  // TESSERA_CORE_STATUS_MATCHERS_H_
