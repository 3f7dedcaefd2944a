// dot and batch_dot, as in MXNet, on //ndarray:math's Gemm (oneDNN sgemm for float32, a
// blocked loop for float64; half types compute in float).
//
// dot: for 2-D operands op(lhs) x op(rhs), op transposing when the flag is set. N-D operands
// are flattened as MXNet does: lhs to (prod of all but its last dim, last dim) - or with
// transpose_a, (first dim, prod of the rest) transposed - and rhs to (first dim, prod of the
// rest) - or with transpose_b, (prod of all but the last, last) transposed. The output shape
// is lhs's free dims followed by rhs's; (1,) when both are 1-D. A 1-D operand is a vector
// whatever its transpose flag.
// batch_dot: 3-D (batch, m, k) x (batch, k, n) per batch item, with the same flags.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ndarray/math.h"
#include "ops/operator.h"
#include "ops/param.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// MXNet 1.9's DotParam (src/operator/tensor/dot-inl.h; batch_dot shares it), all 3 fields:
// transpose_a, transpose_b, forward_stype. forward_stype asks for a sparse output storage
// holding the same values; arrays here are all dense, so it is accepted and ignored.
struct DotParam {
  bool transpose_a = false;
  bool transpose_b = false;
  std::string forward_stype = "None";
};

template <bool kBatch>
const ParamSchema<DotParam>& DotSchema() {
  static const auto* schema = [] {
    auto* s = new ParamSchema<DotParam>(kBatch ? "batch_dot" : "dot");
    s->Field("transpose_a", &DotParam::transpose_a).Describe("use the transpose of lhs");
    s->Field("transpose_b", &DotParam::transpose_b).Describe("use the transpose of rhs");
    s->Field("forward_stype", &DotParam::forward_stype)
        .Enum({{"None", "None"},
               {"default", "default"},
               {"row_sparse", "row_sparse"},
               {"csr", "csr"}})
        .Describe(
            "MXNet's storage type for the output; ignored (the output is dense, with "
            "the same values)");
    return s;
  }();
  return *schema;
}

// One matrix product as Gemm sees it: the stored 2-D shapes and the flags.
struct GemmView {
  Shape a, b, c;  // stored shapes of lhs, rhs, out
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, kb = 0;
};

// The 2-D view of (lhs, rhs) for dot; `out` gets the output shape.
GemmView DotView(const Shape& lhs, const Shape& rhs, const DotParam& p, Shape* out) {
  GemmView v;
  Shape out_shape;
  if (lhs.ndim() == 1) {
    v.m = 1;
    v.k = lhs[0];
    v.a = Shape{1, v.k};
  } else if (!p.transpose_a) {
    v.m = lhs.ProdRange(0, lhs.ndim() - 1);
    v.k = lhs[lhs.ndim() - 1];
    v.a = Shape{v.m, v.k};
    for (int d = 0; d < lhs.ndim() - 1; ++d) out_shape.push_back(lhs[d]);
  } else {
    v.k = lhs[0];
    v.m = lhs.ProdRange(1, lhs.ndim());
    v.a = Shape{v.k, v.m};
    v.ta = true;
    for (int d = 1; d < lhs.ndim(); ++d) out_shape.push_back(lhs[d]);
  }
  if (rhs.ndim() == 1) {
    v.kb = rhs[0];
    v.n = 1;
    v.b = Shape{v.kb, 1};
  } else if (!p.transpose_b) {
    v.kb = rhs[0];
    v.n = rhs.ProdRange(1, rhs.ndim());
    v.b = Shape{v.kb, v.n};
    for (int d = 1; d < rhs.ndim(); ++d) out_shape.push_back(rhs[d]);
  } else {
    v.kb = rhs[rhs.ndim() - 1];
    v.n = rhs.ProdRange(0, rhs.ndim() - 1);
    v.b = Shape{v.n, v.kb};
    v.tb = true;
    for (int d = 0; d < rhs.ndim() - 1; ++d) out_shape.push_back(rhs[d]);
  }
  if (out_shape.ndim() == 0) out_shape = Shape{1};
  v.c = Shape{v.m, v.n};
  *out = out_shape;
  return v;
}

// batch_dot's view of one batch item.
GemmView BatchView(const Shape& lhs, const Shape& rhs, const DotParam& p, Shape* out) {
  GemmView v;
  v.ta = p.transpose_a;
  v.tb = p.transpose_b;
  v.a = Shape{lhs[1], lhs[2]};
  v.b = Shape{rhs[1], rhs[2]};
  v.m = v.ta ? lhs[2] : lhs[1];
  v.k = v.ta ? lhs[1] : lhs[2];
  v.kb = v.tb ? rhs[2] : rhs[1];
  v.n = v.tb ? rhs[1] : rhs[2];
  v.c = Shape{v.m, v.n};
  *out = Shape{lhs[0], v.m, v.n};
  return v;
}

double BetaFor(OpReqType req) { return req == OpReqType::kAddTo ? 1.0 : 0.0; }

TBlob Slice(const TBlob& blob, const Shape& shape, int64_t item) {
  return TBlob(static_cast<char*>(blob.dptr) + item * shape.Size() * DTypeSize(blob.dtype), shape,
               blob.dtype, blob.ctx);
}

template <bool kBatch>
class DotOperator : public Operator {
 public:
  explicit DotOperator(DotParam param) : param_(param) {}

  absl::Status Forward(const OpContext&, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    Shape out_shape;
    const GemmView v = View(in_data[0].shape, in_data[1].shape, &out_shape);
    for (int64_t i = 0; i < Batch(in_data[0]); ++i) {
      RETURN_IF_ERROR(math::Gemm(v.ta, v.tb, 1.0, Slice(in_data[0], v.a, i),
                                 Slice(in_data[1], v.b, i), BetaFor(req[0]),
                                 Slice(out_data[0], v.c, i)));
    }
    return absl::OkStatus();
  }

  // With C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, written back in
  // A's and B's stored orientation by choosing the Gemm operand order and flags.
  absl::Status Backward(const OpContext&, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    Shape out_shape;
    const GemmView v = View(in_data[0].shape, in_data[1].shape, &out_shape);
    for (int64_t i = 0; i < Batch(in_data[0]); ++i) {
      const TBlob a = Slice(in_data[0], v.a, i), b = Slice(in_data[1], v.b, i);
      const TBlob dc = Slice(out_grad[0], v.c, i);
      if (req[0] != OpReqType::kNullOp) {
        const TBlob da = Slice(in_grad[0], v.a, i);
        if (!v.ta) {
          RETURN_IF_ERROR(math::Gemm(false, !v.tb, 1.0, dc, b, BetaFor(req[0]), da));
        } else {
          RETURN_IF_ERROR(math::Gemm(v.tb, true, 1.0, b, dc, BetaFor(req[0]), da));
        }
      }
      if (req[1] != OpReqType::kNullOp) {
        const TBlob db = Slice(in_grad[1], v.b, i);
        if (!v.tb) {
          RETURN_IF_ERROR(math::Gemm(!v.ta, false, 1.0, a, dc, BetaFor(req[1]), db));
        } else {
          RETURN_IF_ERROR(math::Gemm(true, v.ta, 1.0, dc, a, BetaFor(req[1]), db));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  GemmView View(const Shape& lhs, const Shape& rhs, Shape* out) const {
    return kBatch ? BatchView(lhs, rhs, param_, out) : DotView(lhs, rhs, param_, out);
  }
  int64_t Batch(const TBlob& lhs) const { return kBatch ? lhs.shape[0] : 1; }

  DotParam param_;
};

template <bool kBatch>
struct DotParamFor : DotParam {
  static const ParamSchema<DotParam>& Schema() { return DotSchema<kBatch>(); }
};

template <bool kBatch>
class DotProp : public OperatorProperty {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    return DotSchema<kBatch>().Init(&param_, kwargs);
  }
  std::map<std::string, std::string> GetParams() const override {
    return DotSchema<kBatch>().Get(param_);
  }
  std::unique_ptr<OperatorProperty> Copy() const override {
    return std::make_unique<DotProp>(*this);
  }
  std::vector<std::string> ListArguments() const override { return {"lhs", "rhs"}; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& lhs = (*in_shape)[0];
    const Shape& rhs = (*in_shape)[1];
    if (!lhs.is_known() || !rhs.is_known()) return false;
    const auto mismatch = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(TypeString(), ": ", why, ": lhs ", lhs.ToString(), ", rhs ", rhs.ToString(),
                       " (transpose_a=", param_.transpose_a ? "true" : "false",
                       ", transpose_b=", param_.transpose_b ? "true" : "false", ")"));
    };
    if (kBatch && (lhs.ndim() != 3 || rhs.ndim() != 3)) {
      return mismatch("arguments must be 3-D (batch, rows, cols)");
    }
    if (kBatch && lhs[0] != rhs[0]) return mismatch("batch sizes differ");
    Shape out;
    const GemmView v = kBatch ? BatchView(lhs, rhs, param_, &out) : DotView(lhs, rhs, param_, &out);
    if (v.k != v.kb) {
      return mismatch(absl::StrCat("inner dimensions ", v.k, " and ", v.kb, " differ"));
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, out, out_shape));
    return true;
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[0], in_data[1]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<DotOperator<kBatch>>(param_);
  }

  std::string TypeString() const override { return kBatch ? "batch_dot" : "dot"; }

 private:
  DotParam param_;
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(dot, DotProp<false>)
    .Describe(
        "Matrix product of lhs and rhs (N-D operands flattened to 2-D as in MXNet); "
        "transpose_a/transpose_b transpose the operands.")
    .AddParams<DotParamFor<false>>();
TESSERA_REGISTER_OP_PROPERTY(batch_dot, DotProp<true>)
    .Describe("Batched matrix product of 3-D lhs (batch, m, k) and rhs (batch, k, n).")
    .AddParams<DotParamFor<true>>();

}  // namespace tessera::ops
