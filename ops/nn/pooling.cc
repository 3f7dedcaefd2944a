// Pooling (MXNet, 2-D NCHW): max, avg, sum and lp over windows, or over the whole plane
// with global_pool; output sizes by pooling_convention 'valid' (floor) or 'full' (ceil).
// CPU kernel: loops over NCHW planes with MXNet's window rules (padding is never read; avg
// divides by the window clipped to the padded input, or to the input without
// count_include_pad; lp is (sum over the window of x^p)^(1/p)). Max-pooling backward sends
// each gradient to the first input in the window equal to the output, as MXNet's CPU kernel
// does, so nothing is kept between Forward and Backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/nn/conv_util.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

enum class PoolType { kMax, kAvg, kSum, kLp };
// kSame is MXNet's 1-D-only convention, refused here (2-D pooling).
enum class Convention { kValid, kFull, kSame };

// MXNet 1.9's PoolingParam (src/operator/nn/pooling-inl.h), all 10 fields: kernel,
// pool_type, global_pool, cudnn_off, pooling_convention, stride, pad, p_value,
// count_include_pad, layout. Implemented, for 2-D data; pooling_convention 'same' (1-D
// only in MXNet) and layouts other than NCHW are refused; cudnn_off is ignored. MXNet's
// optional p_value and count_include_pad: None is 0 (unset) and true.
struct PoolingParam {
  Shape kernel;
  PoolType pool_type = PoolType::kMax;
  bool global_pool = false;
  Shape stride;
  Shape pad;
  Convention pooling_convention = Convention::kValid;
  bool count_include_pad = true;
  int p_value = 0;              // lp's power; 0 is MXNet's None (unset)
  bool cudnn_off = false;       // MXNet backend selection; unused
  std::string layout = "None";  // MXNet's names; the schema refuses all but NCHW
  static const ParamSchema<PoolingParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<PoolingParam>("Pooling");
      s->Field("kernel", &PoolingParam::kernel)
          .Lower(1)
          .Describe("window (h, w); ignored with global_pool");
      s->Field("pool_type", &PoolingParam::pool_type)
          .Enum({{"max", PoolType::kMax},
                 {"avg", PoolType::kAvg},
                 {"sum", PoolType::kSum},
                 {"lp", PoolType::kLp}})
          .Describe("reduction over each window");
      s->Field("global_pool", &PoolingParam::global_pool).Describe("pool over the whole plane");
      s->Field("stride", &PoolingParam::stride).Lower(1).Describe("stride (h, w); default (1, 1)");
      s->Field("pad", &PoolingParam::pad).Lower(0).Describe("padding (h, w); default (0, 0)");
      s->Field("pooling_convention", &PoolingParam::pooling_convention)
          .Enum({{"valid", Convention::kValid},
                 {"full", Convention::kFull},
                 {"same", Convention::kSame}})
          .SupportedOnly({Convention::kValid, Convention::kFull})
          .Describe("output size: floor ('valid') or ceil ('full') of the window sweep");
      s->Field("count_include_pad", &PoolingParam::count_include_pad)
          .Describe("avg: whether padded elements count in the divisor");
      s->Field("p_value", &PoolingParam::p_value)
          .Lower(0)
          .Describe("lp: the power p (>= 1), y = (sum x^p)^(1/p); 0 or 'None': unset");
      s->Field("cudnn_off", &PoolingParam::cudnn_off)
          .Describe("accepted for MXNet compatibility; ignored");
      AddLayoutField(s);
      return s;
    }();
    return *schema;
  }
};

// The window for one data shape, after global_pool and defaults.
struct Window {
  std::array<int64_t, 2> kernel, stride, pad, out;
};

absl::StatusOr<Window> GetWindow(const PoolingParam& p, const Shape& data) {
  Window w;
  if (p.global_pool) {
    w.kernel = {data[2], data[3]};
    w.stride = {1, 1};
    w.pad = {0, 0};
    w.out = {1, 1};
    return w;
  }
  if (p.kernel.ndim() == 0) {
    return absl::InvalidArgumentError("Pooling: parameter 'kernel' is required unless global_pool");
  }
  ASSIGN_OR_RETURN(w.kernel, Pair2D(p.kernel, 1, "Pooling", "kernel"));
  ASSIGN_OR_RETURN(w.stride, Pair2D(p.stride, 1, "Pooling", "stride"));
  ASSIGN_OR_RETURN(w.pad, Pair2D(p.pad, 0, "Pooling", "pad"));
  for (int i = 0; i < 2; ++i) {
    const int64_t span = data[2 + i] + 2 * w.pad[i] - w.kernel[i];
    if (span < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: kernel ", p.kernel.ToString(), " is larger than argument 'data' ",
                       data.ToString(), " padded by ", p.pad.ToString()));
    }
    if (w.pad[i] >= w.kernel[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Pooling: pad ", p.pad.ToString(), " must be smaller than kernel ", p.kernel.ToString()));
    }
    w.out[i] =
        1 + (p.pooling_convention == Convention::kValid ? span / w.stride[i]
                                                        : (span + w.stride[i] - 1) / w.stride[i]);
  }
  return w;
}

// lp pooling. x^p and its real p-th root: MXNet's identity / sqrt / cbrt for p = 1, 2, 3.
// MXNet has no p > 3; there pow(sum, 1/p) would be NaN for a negative sum (odd p), so the
// real root extends cbrt instead.
double PowP(double x, int p) {
  switch (p) {
    case 1:
      return x;
    case 2:
      return x * x;
    case 3:
      return x * x * x;
    default:
      return std::pow(x, p);
  }
}

double RootP(double sum, int p) {
  switch (p) {
    case 1:
      return sum;
    case 2:
      return std::sqrt(sum);
    case 3:
      return std::cbrt(sum);
    default:
      return std::copysign(std::pow(std::abs(sum), 1.0 / p), sum);
  }
}

// One output position's window along rows (i = 0) or columns (i = 1): the input indices
// [first, last) it covers, clipped to the input, and the length of the window clipped to
// the padded input instead (MXNet's avg divisor with count_include_pad).
struct Extent {
  int64_t first, last, padded;
};

Extent WindowExtent(const Window& w, int i, int64_t o, int64_t in) {
  const int64_t start = o * w.stride[i] - w.pad[i];
  const int64_t padded_end = std::min(start + w.kernel[i], in + w.pad[i]);
  return {std::max<int64_t>(start, 0), std::min(start + w.kernel[i], in), padded_end - start};
}

// The extents of every output row and column of one data shape.
struct Extents {
  std::vector<Extent> rows, cols;
  int64_t h, w;  // the input plane
  // Every window is the whole 2x2 block at (2 * row, 2 * column): no padding or clipping.
  bool whole_2x2 = false;
};

Extents AllExtents(const Window& w, const Shape& data) {
  Extents e{.h = data[2], .w = data[3]};
  for (int64_t o = 0; o < w.out[0]; ++o) e.rows.push_back(WindowExtent(w, 0, o, e.h));
  for (int64_t o = 0; o < w.out[1]; ++o) e.cols.push_back(WindowExtent(w, 1, o, e.w));
  const auto whole_2x2 = [](const std::vector<Extent>& extents) {
    for (size_t o = 0; o < extents.size(); ++o) {
      const int64_t start = 2 * static_cast<int64_t>(o);
      if (extents[o].first != start || extents[o].last != start + 2) return false;
    }
    return true;
  };
  e.whole_2x2 = whole_2x2(e.rows) && whole_2x2(e.cols);
  return e;
}

// Max pooling over whole 2x2 blocks (LeNet's and VGG's pools): ForwardPlanes<kMax> and
// BackwardPlanes<kMax> with the window loops unrolled and, with SSE2, four windows (forward)
// or two (backward) to a vector. The same comparisons in the same order as those loops,
// branch-free, so the results are the same bits: after a ReLU most windows hold ties at 0,
// and the branches of a scalar "first maximum" search were mispredicted half the time.
//
// One output row: `ow` windows over the input rows `a` and `b`.
void MaxForward2x2Row(const float* a, const float* b, int64_t ow, OpReqType req, float* y) {
  int64_t k = 0;
#ifdef __SSE2__
  if (req != OpReqType::kAddTo) {
    // _mm_max_ps(x, v) is x > v ? x : v, i.e. std::max(v, x), NaN and signed zeros included.
    const __m128 lowest = _mm_set1_ps(std::numeric_limits<float>::lowest());
    for (; k + 4 <= ow; k += 4) {
      const __m128 a0 = _mm_loadu_ps(a + 2 * k), a1 = _mm_loadu_ps(a + 2 * k + 4);
      const __m128 b0 = _mm_loadu_ps(b + 2 * k), b1 = _mm_loadu_ps(b + 2 * k + 4);
      __m128 v = _mm_max_ps(_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)), lowest);
      v = _mm_max_ps(_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)), v);
      v = _mm_max_ps(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), v);
      v = _mm_max_ps(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1)), v);
      _mm_storeu_ps(y + k, v);
    }
  }
#endif
  for (; k < ow; ++k) {
    float value = std::numeric_limits<float>::lowest();
    value = std::max(value, a[2 * k]);
    value = std::max(value, a[2 * k + 1]);
    value = std::max(value, b[2 * k]);
    value = std::max(value, b[2 * k + 1]);
    Assign(y + k, req, value);
  }
}

// One output row's gradient into the input rows `da` and `db` (over `a` and `b`): the
// window's first input equal to its output gets dy, the rest of it 0 (or nothing added).
void MaxBackward2x2Row(const float* a, const float* b, const float* ys, const float* dys,
                       int64_t ow, bool add, float* da, float* db) {
  int64_t k = 0;
#ifdef __SSE2__
  // Two windows to a vector: lanes (0, 1) hold the first window's pair of a row, (2, 3) the
  // second's; y and dy are spread to match.
  const __m128 odd = _mm_castsi128_ps(_mm_set_epi32(-1, 0, -1, 0));
  for (; k + 2 <= ow; k += 2) {
    const __m128 y2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ys + k)));
    const __m128 dy2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dys + k)));
    const __m128 y = _mm_unpacklo_ps(y2, y2), dy = _mm_unpacklo_ps(dy2, dy2);
    const __m128 ea = _mm_cmpeq_ps(_mm_loadu_ps(a + 2 * k), y);
    const __m128 eb = _mm_cmpeq_ps(_mm_loadu_ps(b + 2 * k), y);
    // The left lane's match, seen from the right lane: a right lane takes dy only if its
    // left neighbour did not.
    const __m128 ea_left = _mm_shuffle_ps(ea, ea, _MM_SHUFFLE(2, 2, 0, 0));
    const __m128 eb_left = _mm_shuffle_ps(eb, eb, _MM_SHUFFLE(2, 2, 0, 0));
    const __m128 ea_any = _mm_or_ps(ea_left, _mm_shuffle_ps(ea, ea, _MM_SHUFFLE(3, 3, 1, 1)));
    const __m128 take_a = _mm_andnot_ps(_mm_and_ps(ea_left, odd), ea);
    const __m128 take_b = _mm_andnot_ps(ea_any, _mm_andnot_ps(_mm_and_ps(eb_left, odd), eb));
    __m128 ga = _mm_and_ps(take_a, dy), gb = _mm_and_ps(take_b, dy);
    if (add) {
      ga = _mm_add_ps(_mm_loadu_ps(da + 2 * k), ga);
      gb = _mm_add_ps(_mm_loadu_ps(db + 2 * k), gb);
    }
    _mm_storeu_ps(da + 2 * k, ga);
    _mm_storeu_ps(db + 2 * k, gb);
  }
#endif
  for (; k < ow; ++k) {
    const float y = ys[k], dy = dys[k];
    const bool m0 = a[2 * k] == y;
    const bool m1 = !m0 && a[2 * k + 1] == y;
    const bool m2 = !m0 && !m1 && b[2 * k] == y;
    const bool m3 = !m0 && !m1 && !m2 && b[2 * k + 1] == y;
    const float g[4] = {m0 ? dy : 0.0f, m1 ? dy : 0.0f, m2 ? dy : 0.0f, m3 ? dy : 0.0f};
    float* const d[4] = {da + 2 * k, da + 2 * k + 1, db + 2 * k, db + 2 * k + 1};
    for (int i = 0; i < 4; ++i) *d[i] = add ? *d[i] + g[i] : g[i];
  }
}

void MaxForward2x2(const Extents& e, int64_t planes, const float* xs, OpReqType req, float* ys) {
  const int64_t oh = static_cast<int64_t>(e.rows.size()), ow = static_cast<int64_t>(e.cols.size());
  for (int64_t c = 0; c < planes; ++c) {
    for (int64_t r = 0; r < oh; ++r) {
      const float* a = xs + (c * e.h + 2 * r) * e.w;
      MaxForward2x2Row(a, a + e.w, ow, req, ys + (c * oh + r) * ow);
    }
  }
}

// The windows do not overlap, so unless `req` adds, every dx element is written once: the
// window's first maximum gets dy, the rest of it 0, and what no window covers (an odd last
// row or column) 0, with no zeroing pass before.
void MaxBackward2x2(const Extents& e, int64_t planes, const float* dys, const float* xs,
                    const float* ys, OpReqType req, float* dxs) {
  const int64_t oh = static_cast<int64_t>(e.rows.size()), ow = static_cast<int64_t>(e.cols.size());
  const bool add = req == OpReqType::kAddTo;
  for (int64_t c = 0; c < planes; ++c) {
    for (int64_t r = 0; r < oh; ++r) {
      const int64_t top = (c * e.h + 2 * r) * e.w, bottom = top + e.w;
      const int64_t out = (c * oh + r) * ow;
      MaxBackward2x2Row(xs + top, xs + bottom, ys + out, dys + out, ow, add, dxs + top,
                        dxs + bottom);
      if (!add) {
        std::fill(dxs + top + 2 * ow, dxs + top + e.w, 0.0f);
        std::fill(dxs + bottom + 2 * ow, dxs + bottom + e.w, 0.0f);
      }
    }
    if (!add) std::fill(dxs + (c * e.h + 2 * oh) * e.w, dxs + (c + 1) * e.h * e.w, 0.0f);
  }
}

// avg's divisor: the window clipped to the padded input (count_include_pad) or to the input.
float AvgDivisor(const PoolingParam& p, const Extent& r, const Extent& c) {
  return static_cast<float>(p.count_include_pad ? r.padded * c.padded
                                                : (r.last - r.first) * (c.last - c.first));
}

// y = pool(x) over every plane, stored per `req`. One instantiation per pool type, so the
// window loops carry no branch on it. max, avg and sum accumulate in float; lp in double.
template <PoolType kType>
void ForwardPlanes(const PoolingParam& param, const Extents& e, int64_t planes, const float* xs,
                   OpReqType req, float* ys) {
  const int64_t out_plane = static_cast<int64_t>(e.rows.size() * e.cols.size());
  for (int64_t c = 0; c < planes; ++c) {
    const float* xp = xs + c * e.h * e.w;
    float* yp = ys + c * out_plane;
    for (const Extent& r : e.rows) {
      for (const Extent& col : e.cols) {
        float value;
        if constexpr (kType == PoolType::kMax) {
          // An empty window (possible under 'full') gives MXNet's lowest float.
          value = std::numeric_limits<float>::lowest();
          for (int64_t i = r.first; i < r.last; ++i) {
            for (int64_t j = col.first; j < col.last; ++j) value = std::max(value, xp[i * e.w + j]);
          }
        } else if constexpr (kType == PoolType::kLp) {
          double sum = 0;
          for (int64_t i = r.first; i < r.last; ++i) {
            for (int64_t j = col.first; j < col.last; ++j) {
              sum += PowP(xp[i * e.w + j], param.p_value);
            }
          }
          value = static_cast<float>(RootP(sum, param.p_value));
        } else {
          float sum = 0;
          for (int64_t i = r.first; i < r.last; ++i) {
            for (int64_t j = col.first; j < col.last; ++j) sum += xp[i * e.w + j];
          }
          value = kType == PoolType::kAvg ? sum / AvgDivisor(param, r, col) : sum;
        }
        Assign(yp++, req, value);
      }
    }
  }
}

// dx += the gradient through every window (windows may overlap, so dx accumulates; the
// caller zeroes it unless req is kAddTo). max sends dy to the first position in the window
// whose x equals y, as MXNet's CPU kernel does, so Backward needs no argmax kept from
// Forward. lp: dy * (x / y)^(p-1), 0 where y == 0 (MXNet's lp_grad).
template <PoolType kType>
void BackwardPlanes(const PoolingParam& param, const Extents& e, int64_t planes, const float* dys,
                    const float* xs, const float* ys, float* dxs) {
  const int64_t out_plane = static_cast<int64_t>(e.rows.size() * e.cols.size());
  for (int64_t c = 0; c < planes; ++c) {
    const float* xp = xs + c * e.h * e.w;
    float* dxp = dxs + c * e.h * e.w;
    const float* yp = ys + c * out_plane;
    const float* dyp = dys + c * out_plane;
    for (const Extent& r : e.rows) {
      for (const Extent& col : e.cols) {
        const float y = *yp++, dy = *dyp++;
        if constexpr (kType == PoolType::kMax) {
          [&] {
            for (int64_t i = r.first; i < r.last; ++i) {
              for (int64_t j = col.first; j < col.last; ++j) {
                if (xp[i * e.w + j] == y) {
                  dxp[i * e.w + j] += dy;
                  return;
                }
              }
            }
          }();
        } else if constexpr (kType == PoolType::kLp) {
          const int p = param.p_value;
          for (int64_t i = r.first; i < r.last; ++i) {
            for (int64_t j = col.first; j < col.last; ++j) {
              const double x = xp[i * e.w + j];
              const double d = p == 1 ? 1.0 : y == 0 ? 0.0 : PowP(x / y, p - 1);
              dxp[i * e.w + j] += static_cast<float>(dy * d);
            }
          }
        } else {
          const float g = kType == PoolType::kAvg ? dy / AvgDivisor(param, r, col) : dy;
          for (int64_t i = r.first; i < r.last; ++i) {
            for (int64_t j = col.first; j < col.last; ++j) dxp[i * e.w + j] += g;
          }
        }
      }
    }
  }
}

// Calls f(std::integral_constant<PoolType, type>) for the runtime `type`.
template <typename F>
void DispatchPoolType(PoolType type, F&& f) {
  switch (type) {
    case PoolType::kMax:
      return f(std::integral_constant<PoolType, PoolType::kMax>{});
    case PoolType::kAvg:
      return f(std::integral_constant<PoolType, PoolType::kAvg>{});
    case PoolType::kSum:
      return f(std::integral_constant<PoolType, PoolType::kSum>{});
    case PoolType::kLp:
      return f(std::integral_constant<PoolType, PoolType::kLp>{});
  }
}

// The CPU kernel: plain loops over NCHW planes. oneDNN 2.6 pools plain NCHW only with its
// reference implementation (simple_nchw, several times slower than these loops on LeNet's
// layers); its jit kernels need blocked or NHWC data and a reorder each way.
class PoolingOp : public Operator {
 public:
  explicit PoolingOp(PoolingParam param) : param_(param) {}

  absl::Status Forward(const OpContext&, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Extents* e, GetExtents(in[0].shape));
    const int64_t planes = in[0].shape[0] * in[0].shape[1];
    if (param_.pool_type == PoolType::kMax && e->whole_2x2) {
      MaxForward2x2(*e, planes, in[0].data<float>(), req[0], out[0].data<float>());
      return absl::OkStatus();
    }
    DispatchPoolType(param_.pool_type, [&](auto type) {
      ForwardPlanes<decltype(type)::value>(param_, *e, planes, in[0].data<float>(), req[0],
                                           out[0].data<float>());
    });
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext&, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Extents* e, GetExtents(in[0].shape));
    float* dx = in_grad[0].data<float>();
    const int64_t planes = in[0].shape[0] * in[0].shape[1];
    if (param_.pool_type == PoolType::kMax && e->whole_2x2) {
      MaxBackward2x2(*e, planes, out_grad[0].data<float>(), in[0].data<float>(),
                     out[0].data<float>(), req[0], dx);
      return absl::OkStatus();
    }
    if (req[0] != OpReqType::kAddTo) std::fill(dx, dx + in_grad[0].Size(), 0.0f);
    DispatchPoolType(param_.pool_type, [&](auto type) {
      BackwardPlanes<decltype(type)::value>(param_, *e, planes, out_grad[0].data<float>(),
                                            in[0].data<float>(), out[0].data<float>(), dx);
    });
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const Extents*> GetExtents(const Shape& data) {
    Extents* e;
    RETURN_IF_ERROR(cache_.Get(data.ToString(), &e, [&](Extents* fill) -> absl::Status {
      ASSIGN_OR_RETURN(const Window w, GetWindow(param_, data));
      *fill = AllExtents(w, data);
      return absl::OkStatus();
    }));
    return e;
  }

  const PoolingParam param_;
  PrimitiveCache<std::string, Extents> cache_;  // per data shape
};

class PoolingProp : public DnnlProperty<PoolingProp, PoolingParam, PoolingOp> {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    // An unset p_value ("None", see ops/param.h) keeps its default 0.
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    if (!param_.global_pool && param_.kernel.ndim() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: parameter 'kernel' must be (h, w) unless global_pool, got ",
                       param_.kernel.ToString()));
    }
    if (param_.pool_type == PoolType::kLp && param_.p_value < 1) {
      return absl::InvalidArgumentError(
          "Pooling: pool_type 'lp' needs p_value (1, 2, 3 or any integer >= 1), but it is "
          "unset (None or 0)");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[0];
    if (!data.is_known()) return false;
    if (data.ndim() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: argument 'data' must be 4-D (N, C, H, W), got ", data.ToString()));
    }
    ASSIGN_OR_RETURN(Window w, GetWindow(param_, data));
    RETURN_IF_ERROR(
        AssignShape(*this, Slot::kOutput, 0, Shape{data[0], data[1], w.out[0], w.out[1]}, out));
    return true;
  }

  // The CPU loops and cuDNN need no scratch.
  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    return {};
  }
  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return {};
  }

  // Backward depends on everything (the default), as MXNet declares: out_grad, data, out.
  std::string TypeString() const override { return "Pooling"; }
};

TESSERA_REGISTER_OP_PROPERTY(Pooling, PoolingProp)
    .Describe("2-D max / avg / sum / lp pooling over NCHW data, optionally global.")
    .AddParams<PoolingParam>();

}  // namespace
}  // namespace tessera::ops::nn
