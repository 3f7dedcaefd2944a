// LeakyReLU on the GPU (ops/array/leaky_relu.cc's twin): leaky, elu, prelu, rrelu, selu and
// gelu on own elementwise kernels (random_kernels.h), float32 and float64, with the CPU's
// formulas and its choice of what backward reads (x, or y whose sign is x's). prelu's gamma
// is per channel (axis 1), or one for all, and its gradient is reduced over the other axes
// in double, as the CPU sums it. rrelu draws one slope per element from the kRandom resource's
// Philox generator while training - the CPU's draws for the same generator state - and keeps the
// slopes in the hidden `mask` output that backward reads; in inference the slope is the bounds'
// mean.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/random_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

struct LeakyParams {
  LeakyKind kind = LeakyKind::kLeaky;
  float slope = 0.25f;
  float lower_bound = 0.125f;
  float upper_bound = 0.334f;

  // ops/array/leaky_relu.cc's BackwardReadsInput: whether the sign of y may differ from x's.
  bool BackwardReadsInput() const {
    switch (kind) {
      case LeakyKind::kPReLU:
      case LeakyKind::kGelu:
        return true;
      case LeakyKind::kRReLU:
        return lower_bound < 0;
      case LeakyKind::kSelu:
        return false;
      default:
        return slope < 0;
    }
  }
};

absl::StatusOr<KernelType> TypeOf(DType dtype) {
  if (dtype == DType::kFloat32) return KernelType::kFloat32;
  if (dtype == DType::kFloat64) return KernelType::kFloat64;
  return absl::InvalidArgumentError(
      absl::StrCat("LeakyReLU: dtype ", DTypeName(dtype), " has no GPU kernel (float32, float64)"));
}

// prelu's layout, as the CPU's LayoutOf: (channels, inner) into `args`, returning outer.
// Axis 1 is the channel axis; 1-D data, or a gamma of one element, is one channel.
int64_t PReluLayout(const Shape& s, int64_t gamma_size, LeakyArgs* args) {
  if (s.ndim() < 2 || gamma_size == 1) {
    args->channels = 1;
    args->inner = s.Size();
    return 1;
  }
  args->channels = s[1];
  args->inner = s.ProdRange(2, s.ndim());
  return s[0];
}

class LeakyReLUGpuOp : public Operator {
 public:
  explicit LeakyReLUGpuOp(LeakyParams p) : p_(p) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(const KernelType type, TypeOf(in[0].dtype));
    const int64_t n = in[0].Size();
    if (p_.kind == LeakyKind::kRReLU) {
      engine::PhiloxRandom* gen = nullptr;
      if (ctx.is_train) {
        for (const Resource& r : ctx.requested) {
          if (r.type == ResourceRequest::kRandom) gen = r.get_random();
        }
        if (gen == nullptr) {
          return absl::FailedPreconditionError(
              "LeakyReLU: rrelu called without the kRandom resource its property requests");
        }
      }
      // The slopes are state for backward: stored whenever asked for, even under kAddTo.
      void* mask = req[1] != OpReqType::kNullOp ? out[1].dptr : nullptr;
      const engine::PhiloxRandom unused;
      CUDA_RETURN_IF_ERROR(LaunchRReluForward(
          type, p_.lower_bound, p_.upper_bound, ctx.is_train, gen != nullptr ? *gen : unused,
          in[0].dptr, out[0].dptr, static_cast<int>(req[0]), mask, n, StreamOf(ctx)));
      // The CPU draws n slopes in training whatever the reqs; so does the stream here.
      if (gen != nullptr) gen->Skip(static_cast<uint64_t>(n));
      return absl::OkStatus();
    }
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    LeakyArgs args = Args();
    const void* gamma = nullptr;
    if (p_.kind == LeakyKind::kPReLU) {
      PReluLayout(in[0].shape, in[1].Size(), &args);
      RETURN_IF_ERROR(CheckType(in[1], type));
      gamma = in[1].dptr;
    }
    CUDA_RETURN_IF_ERROR(LaunchLeakyReluForward(type, args, in[0].dptr, gamma, out[0].dptr,
                                                static_cast<int>(req[0]), n, StreamOf(ctx)));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    const bool gamma_grad = p_.kind == LeakyKind::kPReLU && req[1] != OpReqType::kNullOp;
    if (req[0] == OpReqType::kNullOp && !gamma_grad) return absl::OkStatus();
    ASSIGN_OR_RETURN(const KernelType type, TypeOf(in_grad[0].dtype));
    const bool use_input = p_.BackwardReadsInput();
    const TBlob& s = use_input ? in[0] : out[0];
    const int64_t n = in_grad[0].Size();
    LeakyArgs args = Args();
    const void* extra = nullptr;
    int64_t outer = 0;  // prelu's
    if (p_.kind == LeakyKind::kPReLU) {
      outer = PReluLayout(in[0].shape, in[1].Size(), &args);
      RETURN_IF_ERROR(CheckType(in[1], type));
      extra = in[1].dptr;
    } else if (p_.kind == LeakyKind::kRReLU) {
      RETURN_IF_ERROR(CheckType(out[1], type));
      extra = out[1].dptr;
    }
    RETURN_IF_ERROR(CheckType(s, type));
    CUDA_RETURN_IF_ERROR(LaunchLeakyReluBackward(type, args, use_input, out_grad[0].dptr, s.dptr,
                                                 extra, in_grad[0].dptr, static_cast<int>(req[0]),
                                                 n, StreamOf(ctx)));
    if (gamma_grad) {
      RETURN_IF_ERROR(CheckType(in_grad[1], type));
      CUDA_RETURN_IF_ERROR(LaunchPReluGammaGrad(type, out_grad[0].dptr, in[0].dptr, outer,
                                                args.channels, args.inner, in_grad[1].dptr,
                                                static_cast<int>(req[1]), StreamOf(ctx)));
    }
    return absl::OkStatus();
  }

 private:
  LeakyArgs Args() const {
    LeakyArgs args;
    args.kind = p_.kind;
    args.slope = p_.slope;
    return args;
  }

  // The other blobs a kernel reads or writes must share the data's type.
  static absl::Status CheckType(const TBlob& blob, KernelType type) {
    const DType want = type == KernelType::kFloat32 ? DType::kFloat32 : DType::kFloat64;
    if (blob.dptr == nullptr) {
      return absl::InvalidArgumentError("LeakyReLU: a blob the GPU kernel needs is missing");
    }
    if (blob.dtype != want) {
      return absl::InvalidArgumentError(absl::StrCat("LeakyReLU: got ", DTypeName(blob.dtype),
                                                     " next to ", DTypeName(want), " data"));
    }
    return absl::OkStatus();
  }

  const LeakyParams p_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateLeakyReLU(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  LeakyParams p;
  const std::string act_type = r.Get("act_type", "leaky");
  if (act_type == "leaky") {
    p.kind = LeakyKind::kLeaky;
  } else if (act_type == "elu") {
    p.kind = LeakyKind::kElu;
  } else if (act_type == "prelu") {
    p.kind = LeakyKind::kPReLU;
  } else if (act_type == "rrelu") {
    p.kind = LeakyKind::kRReLU;
  } else if (act_type == "selu") {
    p.kind = LeakyKind::kSelu;
  } else if (act_type == "gelu") {
    p.kind = LeakyKind::kGelu;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("LeakyReLU: act_type '", act_type, "' has no GPU kernel"));
  }
  RETURN_IF_ERROR(r.Read("slope", &p.slope));
  RETURN_IF_ERROR(r.Read("lower_bound", &p.lower_bound));
  RETURN_IF_ERROR(r.Read("upper_bound", &p.upper_bound));
  return std::unique_ptr<Operator>(new LeakyReLUGpuOp(p));
}

const bool kRegistered = [] {
  RegisterGpuOperator("LeakyReLU", CreateLeakyReLU);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda
