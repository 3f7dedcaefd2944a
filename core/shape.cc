#include "core/shape.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera {

int64_t Shape::Size() const { return ProdRange(0, ndim()); }

int64_t Shape::ProdRange(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= dims_[i];
  return n;
}

bool Shape::is_known() const {
  return !dims_.empty() && std::all_of(dims_.begin(), dims_.end(), [](int64_t d) { return d > 0; });
}

Shape::Dims Shape::Strides() const {
  Dims strides(dims_.size(), 1);
  for (int i = ndim() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

Shape Shape::FlatTo2D() const {
  if (dims_.empty()) return Shape{};
  if (dims_.size() == 1) return Shape{1, dims_[0]};
  return Shape{dims_[0], ProdRange(1, ndim())};
}

std::string Shape::ToString() const {
  if (dims_.size() == 1) return absl::StrCat("(", dims_[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims_, ","), ")");
}

absl::StatusOr<Shape> Shape::Parse(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (!body.empty() && (body.front() == '(' || body.front() == '[')) {
    const char close = body.front() == '(' ? ')' : ']';
    if (body.back() != close) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", text, "': unbalanced brackets"));
    }
    body = body.substr(1, body.size() - 2);
  }
  Shape shape;
  for (absl::string_view part : absl::StrSplit(body, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;  // "(2,)" and "()"
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad shape '", text, "': '", part, "' is not a non-negative integer"));
    }
    shape.push_back(d);
  }
  return shape;
}

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int ndim = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < ndim; ++i) {
    const int ia = a.ndim() - ndim + i;
    const int ib = b.ndim() - ndim + i;
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ",
                                                     b.ToString(), " cannot be broadcast together"));
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

absl::StatusOr<int> NormalizeAxis(int axis, int ndim) {
  const int normalized = axis < 0 ? axis + ndim : axis;
  if (normalized < 0 || normalized >= ndim) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for an array of ", ndim, " dimensions"));
  }
  return normalized;
}

absl::Status MergeShape(const Shape& known, Shape* target, absl::string_view what) {
  if (known.ndim() == 0) return absl::OkStatus();
  if (target->ndim() == 0) {
    *target = known;
    return absl::OkStatus();
  }
  if (target->ndim() != known.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("shape mismatch for ", what, ": expected ",
                                                   known.ToString(), ", got ", target->ToString()));
  }
  for (int i = 0; i < known.ndim(); ++i) {
    if (known[i] == 0) continue;
    if ((*target)[i] == 0) {
      (*target)[i] = known[i];
    } else if ((*target)[i] != known[i]) {
      return absl::InvalidArgumentError(absl::StrCat("shape mismatch for ", what, ": expected ",
                                                     known.ToString(), ", got ",
                                                     target->ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
