// SliceChannel (MXNet's `split`): cuts the input into num_outputs equal pieces along
// `axis`, outputs output0 .. output<n-1>, optionally dropping that axis when every piece
// has size 1 along it (squeeze_axis). The backward joins the out_grads back. Every dtype is
// supported. Shape inference also recovers the input from any known output.
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

// MXNet 1.9's SliceChannelParam (src/operator/slice_channel-inl.h), all 3 fields:
// num_outputs, axis, squeeze_axis. All implemented.
struct SliceChannelParam {
  int num_outputs = 0;
  int axis = 1;
  bool squeeze_axis = false;

  static const ParamSchema<SliceChannelParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<SliceChannelParam>("SliceChannel");
      s->Field("num_outputs", &SliceChannelParam::num_outputs)
          .Required()
          .Lower(1)
          .Describe("number of equal pieces");
      s->Field("axis", &SliceChannelParam::axis)
          .Describe("the axis to cut along (negative from the end)");
      s->Field("squeeze_axis", &SliceChannelParam::squeeze_axis)
          .Describe("drop the axis from the outputs; needs data.shape[axis] == num_outputs");
      return s;
    }();
    return *schema;
  }
};

// Copies between the data and the pieces: split when `to_pieces`, else join. The pieces
// all have data.shape[axis] / n entries along the axis.
template <typename T>
void SplitOrJoin(const TBlob& data, const std::vector<TBlob>& pieces, int axis, bool to_pieces,
                 const std::vector<OpReqType>& req) {
  const Shape& shape = data.shape;
  const int64_t n = static_cast<int64_t>(pieces.size());
  const int64_t outer = shape.ProdRange(0, axis);
  const int64_t block = shape[axis] / n * shape.ProdRange(axis + 1, shape.ndim());
  T* whole = data.data<T>();
  for (int64_t k = 0; k < n; ++k) {
    T* piece = pieces[k].data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      T* row = whole + (o * n + k) * block;
      if (to_pieces) {
        array_internal::CopyWithReq(row, piece + o * block, block, req[k]);
      } else {
        array_internal::CopyWithReq(piece + o * block, row, block, req[0]);
      }
    }
  }
}

class SliceChannelOp : public Operator {
 public:
  explicit SliceChannelOp(SliceChannelParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return Run(in_data[0], out_data, true, req);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    return Run(in_grad[0], out_grad, false, req);
  }

 private:
  absl::Status Run(const TBlob& data, const std::vector<TBlob>& pieces, bool to_pieces,
                   const std::vector<OpReqType>& req) {
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(param_.axis, data.ndim()));
    absl::Status status;
    TESSERA_TYPE_SWITCH(
        data.dtype, T, SplitOrJoin<T>(data, pieces, axis, to_pieces, req),
        status = array_internal::UnsupportedDType("SliceChannel", data.dtype, false));
    return status;
  }

  SliceChannelParam param_;
};

class SliceChannelProp : public PropertyWithParam<SliceChannelProp, SliceChannelParam> {
 public:
  std::vector<std::string> ListOutputs() const override {
    return array_internal::NumberedNames("output", param_.num_outputs);
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const int n = param_.num_outputs;
    // Backwards first: a known output determines the data.
    if (!(*in_shape)[0].is_known()) {
      for (int k = 0; k < n; ++k) {
        const Shape& out = (*out_shape)[k];
        if (!out.is_known()) continue;
        const int ndim = out.ndim() + (param_.squeeze_axis ? 1 : 0);
        ASSIGN_OR_RETURN(int axis, AxisFor(ndim));
        Shape data;
        for (int d = 0, j = 0; d < ndim; ++d) {
          if (param_.squeeze_axis && d == axis) {
            data.push_back(n);
          } else {
            data.push_back(d == axis ? out[j] * n : out[j]);
            ++j;
          }
        }
        RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, data, in_shape));
        break;
      }
    }
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    ASSIGN_OR_RETURN(int axis, AxisFor(data.ndim()));
    if (data[axis] % n != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SliceChannel: data of shape ", data.ToString(), " has ", data[axis],
                       " entries along axis ", axis, ", not divisible by num_outputs = ", n));
    }
    if (param_.squeeze_axis && data[axis] != n) {
      return absl::InvalidArgumentError(absl::StrCat("SliceChannel: squeeze_axis needs data.shape[",
                                                     axis, "] == num_outputs, but data has shape ",
                                                     data.ToString(), " and num_outputs = ", n));
    }
    Shape piece;
    for (int d = 0; d < data.ndim(); ++d) {
      if (d != axis) {
        piece.push_back(data[d]);
      } else if (!param_.squeeze_axis) {
        piece.push_back(data[d] / n);
      }
    }
    if (piece.ndim() == 0) piece.push_back(1);  // squeezing a 1-D array leaves scalars
    for (int k = 0; k < n; ++k) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, k, piece, out_shape));
    }
    return true;
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return out_grad;
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<SliceChannelOp>(param_);
  }
  std::string TypeString() const override { return "SliceChannel"; }

 private:
  absl::StatusOr<int> AxisFor(int ndim) const {
    absl::StatusOr<int> axis = NormalizeAxis(param_.axis, ndim);
    if (!axis.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("SliceChannel: ", axis.status().message()));
    }
    return axis;
  }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(SliceChannel, SliceChannelProp)
    .Describe("Splits data into num_outputs equal pieces along `axis` (output0, output1, ...).")
    .AddParams<SliceChannelParam>()
    .AddAlias("split");

}  // namespace tessera::ops
