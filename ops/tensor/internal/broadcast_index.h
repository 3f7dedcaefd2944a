// ForEachBroadcast: walks every element of a shape together with the offsets of the matching
// elements in two arrays that broadcast to it (NumPy rules, right-aligned, size-1 dims
// repeated). The tensor operators' backward passes use it where a gradient needs the
// inputs element by element (mul, div, pow, max/min, argmax masks); plain forward math
// goes through //ndarray:math's collapsed fast paths instead. Stateless.
#ifndef TESSERA_OPS_TENSOR_INTERNAL_BROADCAST_INDEX_H_
#define TESSERA_OPS_TENSOR_INTERNAL_BROADCAST_INDEX_H_

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "core/shape.h"

namespace tessera::ops::tensor_internal {

// Calls fn(i, ia, ib) for i = 0..out.Size()-1 in row-major order, `ia`/`ib` being the
// element offsets in `a`/`b`. Both must broadcast to `out` (the caller checked).
template <typename Fn>
void ForEachBroadcast(const Shape& out, const Shape& a, const Shape& b, Fn&& fn) {
  const int nd = out.ndim();
  absl::InlinedVector<int64_t, 6> sa(nd, 0), sb(nd, 0), idx(nd, 0);
  int64_t ra = 1, rb = 1;
  for (int d = nd - 1; d >= 0; --d) {
    const int da = a.ndim() - nd + d, db = b.ndim() - nd + d;
    const int64_t na = da >= 0 ? a[da] : 1, nb = db >= 0 ? b[db] : 1;
    sa[d] = na == 1 ? 0 : ra;
    sb[d] = nb == 1 ? 0 : rb;
    ra *= na;
    rb *= nb;
  }
  const int64_t n = out.Size();
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, ia, ib);
    for (int d = nd - 1; d >= 0; --d) {
      ia += sa[d];
      ib += sb[d];
      if (++idx[d] < out[d]) break;
      ia -= sa[d] * out[d];
      ib -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

}  // namespace tessera::ops::tensor_internal

#endif  // TESSERA_OPS_TENSOR_INTERNAL_BROADCAST_INDEX_H_
