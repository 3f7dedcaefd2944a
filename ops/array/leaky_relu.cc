// LeakyReLU: the family of rectifiers with a non-zero response below 0, as MXNet's
// src/operator/leaky_relu-inl.h:
//   leaky  y = x > 0 ? x : slope * x
//   elu    y = x > 0 ? x : slope * (exp(x) - 1)
//   prelu  y = x > 0 ? x : gamma[c] * x        (gamma a learned argument, one per channel,
//                                               the channel axis being 1; or a single one
//                                               for every channel, Gluon's PReLU default)
//   rrelu  y = x > 0 ? x : s * x, s ~ U[lower_bound, upper_bound] per element when training
//          and (lower_bound + upper_bound) / 2 otherwise; the slopes go to the hidden `mask`
//          output that backward reads.
//   selu   y = lambda * (x > 0 ? x : alpha * (exp(x) - 1)), alpha and lambda the constants
//          of Klambauer et al. 2017 (MXNet ignores slope here too)
//   gelu   y = x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))), the exact form MXNet uses
//
// Backward only needs to know on which side of 0 each x was. With a non-negative slope the
// sign of y is the sign of x, so (as MXNet) backward reads the output and the forward may
// run in place. A negative slope makes y positive on both sides; then backward reads the
// input and in-place forward is not offered. gelu is not monotonic, so it always reads the
// input.
#include <cmath>
#include <map>
#include <memory>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/philox.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

using array_internal::MapWithReq;

enum class LeakyReLUType { kLeaky, kElu, kPReLU, kRReLU, kSelu, kGelu };

// SELU's fixed point constants (Klambauer et al. 2017, as MXNet's mshadow_op::selu).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluLambda = 1.0507009873554804934193349852946;
// For GELU's normal CDF and density.
constexpr double kInvSqrt2 = 1 / std::numbers::sqrt2;
constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi * kInvSqrt2;

// MXNet 1.9's LeakyReLUParam (src/operator/leaky_relu-inl.h), all 4 fields: act_type (all
// six types), slope, lower_bound, upper_bound. All implemented.
struct LeakyReLUParam {
  LeakyReLUType act_type = LeakyReLUType::kLeaky;
  float slope = 0.25f;
  float lower_bound = 0.125f;
  float upper_bound = 0.334f;

  static const ParamSchema<LeakyReLUParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<LeakyReLUParam>("LeakyReLU");
      s->Field("act_type", &LeakyReLUParam::act_type)
          .Enum({{"leaky", LeakyReLUType::kLeaky},
                 {"elu", LeakyReLUType::kElu},
                 {"prelu", LeakyReLUType::kPReLU},
                 {"rrelu", LeakyReLUType::kRReLU},
                 {"selu", LeakyReLUType::kSelu},
                 {"gelu", LeakyReLUType::kGelu}})
          .Describe("the activation function");
      s->Field("slope", &LeakyReLUParam::slope).Describe("slope for leaky, alpha for elu");
      s->Field("lower_bound", &LeakyReLUParam::lower_bound)
          .Describe("lower bound of the random slope (rrelu)");
      s->Field("upper_bound", &LeakyReLUParam::upper_bound)
          .Describe("upper bound of the random slope (rrelu)");
      return s;
    }();
    return *schema;
  }

  // Whether backward must look at x itself (see the file comment).
  bool BackwardReadsInput() const {
    switch (act_type) {
      case LeakyReLUType::kPReLU:
        return true;
      case LeakyReLUType::kRReLU:
        return lower_bound < 0;
      case LeakyReLUType::kSelu:
        return false;
      case LeakyReLUType::kGelu:
        return true;
      default:
        return slope < 0;
    }
  }
};

// (outer, channels, inner) of data for prelu's gamma of `gamma_size` elements: one per
// channel, axis 1 (1-D data has a single channel), or, with a single element, one channel
// holding everything (MXNet broadcasts such a gamma).
struct ChannelLayout {
  int64_t outer, channels, inner;
};
ChannelLayout LayoutOf(const Shape& s, int64_t gamma_size) {
  if (s.ndim() < 2 || gamma_size == 1) return {1, 1, s.Size()};
  return {s[0], s[1], s.ProdRange(2, s.ndim())};
}

class LeakyReLUOp : public Operator {
 public:
  explicit LeakyReLUOp(LeakyReLUParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_data[0].dtype, T, status = ForwardT<T>(ctx, in_data, req, out_data),
        status = array_internal::UnsupportedDType("LeakyReLU", in_data[0].dtype, true));
    return status;
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_grad[0].dtype, T, status = BackwardT<T>(out_grad, in_data, out_data, req, in_grad),
        status = array_internal::UnsupportedDType("LeakyReLU", in_grad[0].dtype, true));
    return status;
  }

 private:
  template <typename T>
  absl::Status ForwardT(const OpContext& ctx, const std::vector<TBlob>& in_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data) {
    using A = AccType<T>;
    const T* x = in_data[0].data<T>();
    T* y = out_data[0].data<T>();
    const int64_t n = in_data[0].Size();
    const A slope = static_cast<A>(param_.slope);
    switch (param_.act_type) {
      case LeakyReLUType::kLeaky:
        MapWithReq(y, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(x[i]);
          return v > 0 ? v : slope * v;
        });
        break;
      case LeakyReLUType::kElu:
        MapWithReq(y, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(x[i]);
          return v > 0 ? v : slope * (std::exp(v) - A(1));
        });
        break;
      case LeakyReLUType::kSelu:
        MapWithReq(y, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(x[i]);
          return A(kSeluLambda) * (v > 0 ? v : A(kSeluAlpha) * (std::exp(v) - A(1)));
        });
        break;
      case LeakyReLUType::kGelu:
        MapWithReq(y, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(x[i]);
          return A(0.5) * v * (A(1) + std::erf(v * A(kInvSqrt2)));
        });
        break;
      case LeakyReLUType::kPReLU: {
        const T* gamma = in_data[1].data<T>();
        const ChannelLayout l = LayoutOf(in_data[0].shape, in_data[1].Size());
        for (int64_t o = 0; o < l.outer; ++o) {
          for (int64_t c = 0; c < l.channels; ++c) {
            const int64_t base = (o * l.channels + c) * l.inner;
            const A g = static_cast<A>(gamma[c]);
            MapWithReq(y + base, l.inner, req[0], [&](int64_t i) {
              const A v = static_cast<A>(x[base + i]);
              return v > 0 ? v : g * v;
            });
          }
        }
        break;
      }
      case LeakyReLUType::kRReLU: {
        const A lo = static_cast<A>(param_.lower_bound);
        const A hi = static_cast<A>(param_.upper_bound);
        // Slopes in AccType, so half-precision storage of the mask does not change the
        // forward result; the mask is stored whenever asked for (short of kNullOp), since
        // it is state for backward and accumulating slopes would be meaningless.
        std::vector<A> slopes(n, (lo + hi) / 2);
        if (ctx.is_train) {
          engine::PhiloxRandom* rng = ctx.requested.at(0).get_random();
          for (int64_t i = 0; i < n; ++i) {
            slopes[i] = lo + (hi - lo) * static_cast<A>(rng->NextUniform());
          }
        }
        MapWithReq(y, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(x[i]);
          return v > 0 ? v : slopes[i] * v;
        });
        if (req[1] != OpReqType::kNullOp) {
          T* mask = out_data[1].data<T>();
          for (int64_t i = 0; i < n; ++i) mask[i] = static_cast<T>(slopes[i]);
        }
        break;
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status BackwardT(const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                         const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                         const std::vector<TBlob>& in_grad) {
    using A = AccType<T>;
    const bool use_input = param_.BackwardReadsInput();
    // `s` has the sign of x; for elu read from y, y + slope is slope * exp(x).
    const T* s = use_input ? in_data[0].data<T>() : out_data[0].data<T>();
    const T* og = out_grad[0].data<T>();
    T* gx = in_grad[0].data<T>();
    const int64_t n = in_grad[0].Size();
    const A slope = static_cast<A>(param_.slope);
    switch (param_.act_type) {
      case LeakyReLUType::kLeaky:
        MapWithReq(gx, n, req[0], [&](int64_t i) {
          const A g = static_cast<A>(og[i]);
          return static_cast<A>(s[i]) > 0 ? g : slope * g;
        });
        break;
      case LeakyReLUType::kElu:
        MapWithReq(gx, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(s[i]);
          const A g = static_cast<A>(og[i]);
          if (v > 0) return g;
          return g * (use_input ? slope * std::exp(v) : v + slope);
        });
        break;
      case LeakyReLUType::kSelu:
        // Below 0, dy/dx = lambda * alpha * exp(x) = y + lambda * alpha.
        MapWithReq(gx, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(s[i]);
          const A g = static_cast<A>(og[i]);
          return v > 0 ? A(kSeluLambda) * g : g * (v + A(kSeluLambda * kSeluAlpha));
        });
        break;
      case LeakyReLUType::kGelu:
        // d/dx x Phi(x) = Phi(x) + x phi(x).
        MapWithReq(gx, n, req[0], [&](int64_t i) {
          const A v = static_cast<A>(s[i]);
          const A cdf = A(0.5) * (A(1) + std::erf(v * A(kInvSqrt2)));
          const A pdf = std::exp(A(-0.5) * v * v) * A(kInvSqrt2Pi);
          return static_cast<A>(og[i]) * (cdf + v * pdf);
        });
        break;
      case LeakyReLUType::kRReLU: {
        const T* mask = out_data[1].data<T>();
        MapWithReq(gx, n, req[0], [&](int64_t i) {
          const A g = static_cast<A>(og[i]);
          return static_cast<A>(s[i]) > 0 ? g : static_cast<A>(mask[i]) * g;
        });
        break;
      }
      case LeakyReLUType::kPReLU: {
        const T* gamma = in_data[1].data<T>();
        T* ggamma = in_grad[1].data<T>();
        const ChannelLayout l = LayoutOf(in_data[0].shape, in_data[1].Size());
        // Summed in double: a channel can hold millions of terms.
        std::vector<double> gamma_sum(l.channels, 0.0);
        for (int64_t o = 0; o < l.outer; ++o) {
          for (int64_t c = 0; c < l.channels; ++c) {
            const int64_t base = (o * l.channels + c) * l.inner;
            const A gc = static_cast<A>(gamma[c]);
            double sum = 0;
            for (int64_t i = 0; i < l.inner; ++i) {
              const A v = static_cast<A>(s[base + i]);
              if (v <= 0) sum += static_cast<double>(v) * static_cast<double>(og[base + i]);
            }
            gamma_sum[c] += sum;
            MapWithReq(gx + base, l.inner, req[0], [&](int64_t i) {
              const A g = static_cast<A>(og[base + i]);
              return static_cast<A>(s[base + i]) > 0 ? g : gc * g;
            });
          }
        }
        MapWithReq(ggamma, l.channels, req[1],
                   [&](int64_t c) { return static_cast<A>(gamma_sum[c]); });
        break;
      }
    }
    return absl::OkStatus();
  }

  LeakyReLUParam param_;
};

class LeakyReLUProp : public PropertyWithParam<LeakyReLUProp, LeakyReLUParam> {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    if (param_.act_type == LeakyReLUType::kRReLU && param_.lower_bound > param_.upper_bound) {
      return absl::InvalidArgumentError(absl::StrCat("LeakyReLU: lower_bound (", param_.lower_bound,
                                                     ") must not exceed upper_bound (",
                                                     param_.upper_bound, ")"));
    }
    return absl::OkStatus();
  }

  std::vector<std::string> ListArguments() const override {
    if (param_.act_type == LeakyReLUType::kPReLU) return {"data", "gamma"};
    return {"data"};
  }
  std::vector<std::string> ListOutputs() const override {
    if (param_.act_type == LeakyReLUType::kRReLU) return {"output", "mask"};
    return {"output"};
  }
  int NumVisibleOutputs() const override { return 1; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    // Element-wise: data and every output share one shape, known from either side.
    for (int o = 0; o < NumOutputs(); ++o) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[o], in_shape));
    }
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    for (int o = 0; o < NumOutputs(); ++o) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, o, data, out_shape));
    }
    // gamma: one per channel unless it is given as a single one (see LayoutOf).
    if (param_.act_type == LeakyReLUType::kPReLU && (*in_shape)[1] != Shape{1}) {
      const int64_t channels = data.ndim() < 2 ? 1 : data[1];
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 1, Shape{channels}, in_shape));
    }
    return true;
  }

  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    return array_internal::InferFloatType(*this, in_type, out_type, aux_type);
  }

  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    if (param_.act_type == LeakyReLUType::kRReLU) return {{ResourceRequest::kRandom}};
    return {};
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    std::vector<int> deps = {out_grad[0]};
    if (param_.BackwardReadsInput()) {
      deps.push_back(in_data[0]);
    } else {
      deps.push_back(out_data[0]);
    }
    if (param_.act_type == LeakyReLUType::kPReLU) deps.push_back(in_data[1]);
    if (param_.act_type == LeakyReLUType::kRReLU) deps.push_back(out_data[1]);
    return deps;
  }

  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    if (param_.BackwardReadsInput()) return {};
    return {{in_data[0], out_data[0]}};
  }

  // Not for prelu, whose gamma gradient reads out_grad as well: kept free of ordering
  // constraints between the two gradients.
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const override {
    if (param_.act_type == LeakyReLUType::kPReLU) return {};
    return {{out_grad[0], in_grad[0]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(array_internal::CheckCpu("LeakyReLU", ctx));
    return std::make_unique<LeakyReLUOp>(param_);
  }
  std::string TypeString() const override { return "LeakyReLU"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(LeakyReLU, LeakyReLUProp)
    .Describe(
        "Leaky rectifiers: leaky (fixed slope), elu, prelu (learned per-channel slope gamma), "
        "rrelu (random slope while training), selu and gelu (exact, with erf).")
    .AddParams<LeakyReLUParam>();

}  // namespace tessera::ops
