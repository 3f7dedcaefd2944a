// GoogleTest matchers for absl::Status / absl::StatusOr (Debian's Abseil has none).
//
//   EXPECT_THAT(status, IsOk());
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("key 7")));
#ifndef TESSERA_CORE_STATUS_MATCHERS_H_
#define TESSERA_CORE_STATUS_MATCHERS_H_

#include <ostream>

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

#endif  // TESSERA_CORE_STATUS_MATCHERS_H_
