// Scalar building blocks of the math kernels (private to //ndarray:math): value conversion
// between dtypes, the binary functions on one element, and the reduction accumulators.
//
// What integer arithmetic does where C++ would be undefined, defined here once:
//  - add, sub, mul wrap around (two's complement), as NumPy's integer arrays do;
//  - x / 0 is 0 (NumPy gives 0 with a warning; we cannot warn from a kernel), and
//    INT_MIN / -1 wraps to INT_MIN instead of trapping;
//  - x ** negative is 1 for x == 1, +-1 for x == -1 and 0 otherwise (the truncated reciprocal),
//    0 ** negative is 0;
//  - a float converted to an integer saturates at the type's limits and NaN becomes 0.
// Floating max/min propagate NaN (NumPy's maximum/minimum). Stateless, thread-compatible.
#ifndef TESSERA_NDARRAY_INTERNAL_MATH_SCALAR_H_
#define TESSERA_NDARRAY_INTERNAL_MATH_SCALAR_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "ndarray/math.h"

namespace tessera::math::internal {

// Converts a value of any storage type to another, going through the compute types, with
// saturation (and NaN -> 0) when a floating value lands in an integer type.
template <typename To, typename From>
inline To Convert(From v) {
  using FA = AccType<From>;
  using TA = AccType<To>;
  const FA x = static_cast<FA>(v);
  if constexpr (std::is_integral_v<TA> && std::is_floating_point_v<FA>) {
    const double d = static_cast<double>(x);
    if (std::isnan(d)) return To(0);
    if (d <= static_cast<double>(std::numeric_limits<TA>::lowest())) {
      return To(std::numeric_limits<TA>::lowest());
    }
    if (d >= static_cast<double>(std::numeric_limits<TA>::max())) {
      return To(std::numeric_limits<TA>::max());
    }
  }
  return static_cast<To>(static_cast<TA>(x));
}

// Wrapping integer arithmetic: through the unsigned type, where overflow is defined.
template <typename A>
inline A WrapAdd(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename A>
inline A WrapSub(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <typename A>
inline A WrapMul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    // uint8_t * uint8_t would promote to (signed) int and could overflow; widen first.
    using U = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename A>
inline A Div(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    if (b == 0) return A(0);
    if constexpr (std::is_signed_v<A>) {
      if (b == A(-1)) return WrapSub(A(0), a);  // INT_MIN / -1 traps on x86
    }
    return static_cast<A>(a / b);
  } else {
    return a / b;
  }
}

template <typename A>
inline A Pow(A base, A exponent) {
  if constexpr (std::is_integral_v<A>) {
    if constexpr (std::is_signed_v<A>) {
      if (exponent < 0) {
        if (base == 1) return A(1);
        if (base == -1) return (exponent % 2 == 0) ? A(1) : A(-1);
        return A(0);
      }
    }
    A result = 1;
    A b = base;
    for (auto e = exponent; e > 0; e /= 2) {
      if (e % 2 == 1) result = WrapMul(result, b);
      b = WrapMul(b, b);
    }
    return result;
  } else {
    return static_cast<A>(std::pow(base, exponent));
  }
}

template <typename A>
inline A Max(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;  // NaN in `a` stays
}
template <typename A>
inline A Min(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

// The binary functions as types, so kernels instantiate a tight loop per function.
template <BinaryOp kOp>
struct BinaryFn {
  template <typename A>
  static A Apply(A a, A b) {
    if constexpr (kOp == BinaryOp::kAdd) return WrapAdd(a, b);
    if constexpr (kOp == BinaryOp::kSub) return WrapSub(a, b);
    if constexpr (kOp == BinaryOp::kMul) return WrapMul(a, b);
    if constexpr (kOp == BinaryOp::kDiv) return Div(a, b);
    if constexpr (kOp == BinaryOp::kPow) return Pow(a, b);
    if constexpr (kOp == BinaryOp::kMax) return Max(a, b);
    if constexpr (kOp == BinaryOp::kMin) return Min(a, b);
  }
};

// Reductions accumulate in double for floating types (a float32 sum over a million elements
// keeps its digits) and in int64 for integers (wrapping; the final cast to the storage type
// gives the same bits as wrapping in the storage type, and mean divides the exact sum).
template <typename T>
using ReduceAcc = std::conditional_t<std::is_integral_v<AccType<T>>, int64_t, double>;

template <ReduceOp kOp, typename R>
struct ReduceFn {
  static R Identity() {
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kMean) return R(0);
    if constexpr (kOp == ReduceOp::kProd) return R(1);
    if constexpr (kOp == ReduceOp::kMax) {
      return std::numeric_limits<R>::has_infinity ? -std::numeric_limits<R>::infinity()
                                                  : std::numeric_limits<R>::lowest();
    }
    if constexpr (kOp == ReduceOp::kMin) {
      return std::numeric_limits<R>::has_infinity ? std::numeric_limits<R>::infinity()
                                                  : std::numeric_limits<R>::max();
    }
  }
  static R Apply(R acc, R v) {
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kMean) return WrapAdd(acc, v);
    if constexpr (kOp == ReduceOp::kProd) return WrapMul(acc, v);
    if constexpr (kOp == ReduceOp::kMax) return Max(acc, v);
    if constexpr (kOp == ReduceOp::kMin) return Min(acc, v);
  }
};

}  // namespace tessera::math::internal

#endif  // TESSERA_NDARRAY_INTERNAL_MATH_SCALAR_H_
