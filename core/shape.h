// Shape: the dimensions of an array, a small inline vector of int64.
//
// Convention during shape inference (as in MXNet's TShape): a shape with no dimensions is
// "unknown", and a dimension of 0 is an unknown dimension. Real arrays therefore have at
// least one dimension; a scalar result is Shape{1}. Plain value type, thread-compatible.
#ifndef TESSERA_CORE_SHAPE_H_
#define TESSERA_CORE_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tessera {

class Shape {
 public:
  using Dims = absl::InlinedVector<int64_t, 5>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}
  template <typename It>
  Shape(It first, It last) : dims_(first, last) {}

  int ndim() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* data() const { return dims_.data(); }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  void push_back(int64_t d) { dims_.push_back(d); }
  absl::Span<const int64_t> dims() const { return dims_; }

  // Product of the dimensions (1 for no dimensions).
  int64_t Size() const;
  // Product of dims [begin, end).
  int64_t ProdRange(int begin, int end) const;
  // At least one dimension and none unknown (0).
  bool is_known() const;
  // Row-major strides in elements.
  Dims Strides() const;
  // (dim0, product of the rest); for a 1-D shape (1, dim0) as in mshadow's FlatTo2D.
  Shape FlatTo2D() const;

  // "(2,3,4)"; "()" for an unknown shape.
  std::string ToString() const;
  // Accepts "(2,3)", "[2, 3]", "2,3", "(2,)" and "()"; INVALID_ARGUMENT names the text.
  static absl::StatusOr<Shape> Parse(absl::string_view text);

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Shape& s) {
    return H::combine(std::move(h), s.dims_);
  }

 private:
  Dims dims_;
};

// NumPy broadcasting of two known shapes: align on the right, each pair of dimensions equal
// or one of them 1. INVALID_ARGUMENT naming both shapes when they are incompatible.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Normalizes `axis` (negative counts from the end) against `ndim`; INVALID_ARGUMENT naming
// both when out of range.
absl::StatusOr<int> NormalizeAxis(int axis, int ndim);

// Merges `known` into `*target` during inference: an unknown target (or unknown dims) takes
// the known values; a mismatch of known dims is INVALID_ARGUMENT naming both shapes and `what`.
absl::Status MergeShape(const Shape& known, Shape* target, absl::string_view what);

}  // namespace tessera

#endif  // TESSERA_CORE_SHAPE_H_
