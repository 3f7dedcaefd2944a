// Embedding: looks rows of `weight` (input_dim x output_dim) up by the indices in `data`
// (of any numeric type: integers, or floats as MXNet's examples store them), giving an
// output of shape data.shape + (output_dim,). The backward scatters out_grad rows into the
// weight gradient (summing repeated indices); indices are not differentiable, so data's
// gradient is zero.
//
// Every index is checked before anything is written: an index outside [0, input_dim) is an
// INVALID_ARGUMENT naming the index, its position and the range, never a wild read.
//
// Types, as MXNet's EmbeddingOpType: the weight and the output share one floating-point type,
// MXNet's `dtype` when given, else the weight's or output's; the indices' type is their own.
// With neither known, indices of a float type lend it to the weight (one type for the call)
// and integer indices get float32 (MXNet's default dtype); unknown indices take the weight's
// type. `sparse_grad` is accepted: the weight gradient is stored dense, with the values
// MXNet's row_sparse gradient holds.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// MXNet 1.9's EmbeddingParam (src/operator/tensor/indexing_op.h), all 4 fields: input_dim,
// output_dim, dtype, sparse_grad. dtype takes MXNet's names but only the floating types are
// implemented (integer weights are refused); MXNet's default is float32, ours None (the
// arrays' type), the same for float32 data. sparse_grad asks for a row-sparse gradient
// holding the same values: accepted, the gradient is stored dense.
struct EmbeddingParam {
  int64_t input_dim = 0;
  int64_t output_dim = 0;
  std::string dtype = "None";
  bool sparse_grad = false;

  static const ParamSchema<EmbeddingParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<EmbeddingParam>("Embedding");
      s->Field("input_dim", &EmbeddingParam::input_dim)
          .Required()
          .Lower(1)
          .Describe("vocabulary size: indices lie in [0, input_dim)");
      s->Field("output_dim", &EmbeddingParam::output_dim)
          .Required()
          .Lower(1)
          .Describe("length of each embedding vector");
      s->Field("dtype", &EmbeddingParam::dtype)
          .Enum({{"None", "None"},
                 {"float16", "float16"},
                 {"bfloat16", "bfloat16"},
                 {"float32", "float32"},
                 {"float64", "float64"},
                 {"uint8", "uint8"},
                 {"int8", "int8"},
                 {"int32", "int32"},
                 {"int64", "int64"}})
          .SupportedOnly({"None", "float16", "bfloat16", "float32", "float64"})
          .Describe("type of the weight and the output; 'None': that of the arrays");
      s->Field("sparse_grad", &EmbeddingParam::sparse_grad)
          .Describe("accepted for MXNet compatibility; the weight gradient is stored dense");
      return s;
    }();
    return *schema;
  }
};

// The indices of `data` as integers (truncated, as a float-to-int cast in MXNet), or
// INVALID_ARGUMENT for the first one outside [0, input_dim) (NaN included).
template <typename T>
absl::StatusOr<std::vector<int64_t>> Indices(const TBlob& data, int64_t input_dim) {
  const T* p = data.data<T>();
  const int64_t n = data.Size();
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(static_cast<AccType<T>>(p[i]));
    if (!(v >= 0 && v < static_cast<double>(input_dim))) {
      return absl::InvalidArgumentError(absl::StrCat("Embedding: index ", v, " at position ", i,
                                                     " of data (shape ", data.shape.ToString(),
                                                     ") is out of range [0, ", input_dim, ")"));
    }
    idx[i] = static_cast<int64_t>(v);
  }
  return idx;
}

class EmbeddingOp : public Operator {
 public:
  explicit EmbeddingOp(EmbeddingParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_data[1].dtype, T,
        TESSERA_TYPE_SWITCH(
            in_data[0].dtype, I, status = (ForwardT<T, I>(in_data, req[0], out_data[0])),
            status = array_internal::UnsupportedDType("Embedding", in_data[0].dtype, false)),
        status = array_internal::UnsupportedDType("Embedding", in_data[1].dtype, true));
    return status;
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_grad[1].dtype, T,
        TESSERA_TYPE_SWITCH(
            in_data[0].dtype, I, status = (BackwardT<T, I>(out_grad[0], in_data[0], req, in_grad)),
            status = array_internal::UnsupportedDType("Embedding", in_data[0].dtype, false)),
        status = array_internal::UnsupportedDType("Embedding", in_grad[1].dtype, true));
    return status;
  }

 private:
  // T: the weight's type; I: the indices'.
  template <typename T, typename I>
  absl::Status ForwardT(const std::vector<TBlob>& in_data, OpReqType req, const TBlob& out) {
    if (req == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices<I>(in_data[0], param_.input_dim));
    const int64_t dim = param_.output_dim;
    const T* weight = in_data[1].data<T>();
    T* y = out.data<T>();
    for (size_t i = 0; i < idx.size(); ++i) {
      array_internal::CopyWithReq(weight + idx[i] * dim, y + i * dim, dim, req);
    }
    return absl::OkStatus();
  }

  template <typename T, typename I>
  absl::Status BackwardT(const TBlob& out_grad, const TBlob& data,
                         const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad) {
    using A = AccType<T>;
    array_internal::ZeroBlob(in_grad[0], req[0]);
    if (req[1] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices<I>(data, param_.input_dim));
    const int64_t dim = param_.output_dim;
    const T* og = out_grad.data<T>();
    // Scatter-add in AccType: half-precision storage would round after every repeated index.
    std::vector<A> sum(in_grad[1].Size(), A(0));
    for (size_t i = 0; i < idx.size(); ++i) {
      A* row = sum.data() + idx[i] * dim;
      const T* g = og + i * dim;
      for (int64_t j = 0; j < dim; ++j) row[j] += static_cast<A>(g[j]);
    }
    array_internal::MapWithReq(in_grad[1].data<T>(), in_grad[1].Size(), req[1],
                               [&](int64_t i) { return sum[i]; });
    return absl::OkStatus();
  }

  EmbeddingParam param_;
};

class EmbeddingProp : public PropertyWithParam<EmbeddingProp, EmbeddingParam> {
 public:
  std::vector<std::string> ListArguments() const override { return {"data", "weight"}; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 1,
                                Shape{param_.input_dim, param_.output_dim}, in_shape));
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    Shape out = data;
    out.push_back(param_.output_dim);
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, out, out_shape));
    return true;
  }

  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    DType& data = (*in_type)[0];
    DType& weight = (*in_type)[1];
    DType& out = (*out_type)[0];
    if (weight != DType::kUnknown && out != DType::kUnknown && weight != out) {
      return absl::InvalidArgumentError(absl::StrCat("Embedding: argument 'weight' is ",
                                                     DTypeName(weight), " but output 'output' is ",
                                                     DTypeName(out)));
    }
    DType dtype = weight != DType::kUnknown ? weight : out;
    if (param_.dtype != "None") {
      ASSIGN_OR_RETURN(const DType fixed, ParseDType(param_.dtype));
      if (dtype != DType::kUnknown && dtype != fixed) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Embedding: ", weight != DType::kUnknown ? "argument 'weight'" : "output 'output'",
            " is ", DTypeName(dtype), " but dtype is ", param_.dtype));
      }
      dtype = fixed;
    }
    if (dtype == DType::kUnknown && data != DType::kUnknown) {
      dtype = IsFloatingPoint(data) ? data : DType::kFloat32;
    }
    if (dtype == DType::kUnknown) return false;
    if (!IsFloatingPoint(dtype)) return array_internal::UnsupportedDType("Embedding", dtype, true);
    weight = out = dtype;
    if (data == DType::kUnknown) data = dtype;
    return true;
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], in_data[0]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<EmbeddingOp>(param_);
  }
  std::string TypeString() const override { return "Embedding"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(Embedding, EmbeddingProp)
    .Describe("Maps integer indices (stored as floats) in data to rows of weight.")
    .AddParams<EmbeddingParam>();

}  // namespace tessera::ops
