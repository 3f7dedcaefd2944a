// Reshape and Flatten: new shapes for the same contiguous data, as MXNet's
// src/operator/reshape-inl.h. The forward is a copy (nothing at all when the executor runs
// it in place, which it may: both directions offer in-place pairs), the backward the copy
// back. Every dtype is supported.
//
// Reshape's `shape` takes MXNet's special values, read left to right against the input
// dimensions (right to left with reverse=True):
//    0  copy this input dimension           -1  infer from the remaining size (at most once)
//   -2  copy all remaining input dimensions -3  merge the next two input dimensions
//   -4  split the next input dimension into the two values that follow (one may be -1)
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// Forward and backward of both operators: a copy between equal-size blobs.
class CopyOp : public Operator {
 public:
  explicit CopyOp(std::string name) : name_(std::move(name)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return array_internal::CopyBlob(in_data[0], out_data[0], req[0], name_);
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    return array_internal::CopyBlob(out_grad[0], in_grad[0], req[0], name_);
  }

 private:
  std::string name_;
};

// What Flatten and Reshape share: dependencies, in-place pairs and the operator.
template <typename Derived, typename Param>
class CopyPropBase : public PropertyWithParam<Derived, Param> {
 public:
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<CopyOp>(this->TypeString());
  }
};

// No parameters, as in MXNet 1.9 (src/operator/tensor/matrix_op.cc).
class FlattenProp : public CopyPropBase<FlattenProp, NoParam> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    const Shape flat{data[0], data.ProdRange(1, data.ndim())};
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, flat, out_shape));
    return true;
  }
  std::string TypeString() const override { return "Flatten"; }
};

// MXNet 1.9's ReshapeParam (src/operator/tensor/matrix_op-inl.h), all 4 fields: shape,
// reverse, and the deprecated target_shape and keep_highest that files from before `shape`
// (MXNet 0.8) use. All implemented.
struct ReshapeParam {
  std::vector<int> shape;
  bool reverse = false;
  std::vector<int> target_shape;
  bool keep_highest = false;

  static const ParamSchema<ReshapeParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ReshapeParam>("Reshape");
      s->Field("shape", &ReshapeParam::shape)
          .Describe("the new shape; 0, -1, -2, -3, -4 are special (see MXNet's Reshape)");
      s->Field("reverse", &ReshapeParam::reverse)
          .Describe("match the special values from the right instead of the left");
      s->Field("target_shape", &ReshapeParam::target_shape)
          .Lower(0)
          .Describe("deprecated form of `shape`, used when it is empty: one 0 is inferred");
      s->Field("keep_highest", &ReshapeParam::keep_highest)
          .Describe("with target_shape: the first dimension stays the input's");
      return s;
    }();
    return *schema;
  }
};

std::string SpecString(const std::vector<int>& spec) {
  return absl::StrCat("(", absl::StrJoin(spec, ","), ")");
}

// One item of a `shape` spec: a value, or -4 with its two factors.
struct SpecItem {
  int v;
  int64_t a = 0, b = 0;
};

// The output shape of reshaping `in` (known) by `spec`; INVALID_ARGUMENT naming both.
absl::StatusOr<Shape> ReshapeTarget(const std::vector<int>& spec, const Shape& in, bool reverse) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: cannot reshape array of shape ",
                                                   in.ToString(), " into shape ", SpecString(spec),
                                                   ": ", why));
  };
  std::vector<SpecItem> items;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == -4) {
      if (i + 2 >= spec.size()) return error("-4 must be followed by two values");
      items.push_back({-4, spec[i + 1], spec[i + 2]});
      i += 2;
    } else {
      items.push_back({spec[i]});
    }
  }
  std::vector<int64_t> src(in.begin(), in.end());
  if (reverse) {
    // Matching from the right: walk both backwards, and emit -4's factors backwards too;
    // the output is reversed again at the end.
    std::reverse(src.begin(), src.end());
    std::reverse(items.begin(), items.end());
    for (SpecItem& item : items) std::swap(item.a, item.b);
  }
  std::vector<int64_t> out;
  size_t next = 0;  // the next input dimension
  int infer_at = -1;
  auto take = [&](int64_t* d) {
    if (next >= src.size()) return false;
    *d = src[next++];
    return true;
  };
  for (const SpecItem& item : items) {
    int64_t d = 0;
    if (item.v > 0) {
      out.push_back(item.v);
      ++next;
    } else if (item.v == 0) {
      if (!take(&d)) return error("0 refers past the last input dimension");
      out.push_back(d);
    } else if (item.v == -1) {
      if (infer_at >= 0) return error("more than one -1");
      infer_at = static_cast<int>(out.size());
      out.push_back(1);
      ++next;
    } else if (item.v == -2) {
      while (take(&d)) out.push_back(d);
    } else if (item.v == -3) {
      int64_t d2 = 0;
      if (!take(&d) || !take(&d2)) return error("-3 needs two more input dimensions");
      out.push_back(d * d2);
    } else if (item.v == -4) {
      if (!take(&d)) return error("-4 refers past the last input dimension");
      int64_t a = item.a, b = item.b;
      if (a == -1 && b == -1) return error("-4 splits into at most one -1");
      if (a < -1 || b < -1 || a == 0 || b == 0) {
        return error("-4 factors must be positive or -1");
      }
      if (a == -1) a = d % b == 0 ? d / b : 0;
      if (b == -1) b = d % a == 0 ? d / a : 0;
      if (a * b != d) {
        return error(absl::StrCat("dimension ", d, " does not split into ", item.a, " x ", item.b));
      }
      out.push_back(a);
      out.push_back(b);
    } else {
      return error(
          absl::StrCat("invalid value ", item.v, " (special values are 0, -1, -2, -3, -4)"));
    }
  }
  if (infer_at >= 0) {
    int64_t known = 1;
    for (int64_t d : out) known *= d;
    if (in.Size() % known != 0) {
      return error(absl::StrCat("its ", in.Size(), " elements are not a multiple of ", known));
    }
    out[infer_at] = in.Size() / known;
  }
  if (reverse) std::reverse(out.begin(), out.end());
  const Shape target(out.begin(), out.end());
  if (target.ndim() == 0) return error("the new shape has no dimensions");
  if (target.Size() != in.Size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Reshape: cannot reshape array of shape ", in.ToString(), " (", in.Size(),
        " elements) into shape ", target.ToString(), " (", target.Size(), " elements)"));
  }
  return target;
}

// The output shape by MXNet's deprecated target_shape: as written, but with keep_highest
// the first dimension is the input's, and a single 0 among the others is inferred from the
// size (more than one 0 stays 0, and then the sizes differ, as in MXNet).
absl::StatusOr<Shape> LegacyReshapeTarget(const std::vector<int>& target, bool keep_highest,
                                          const Shape& in) {
  std::vector<int64_t> out(target.begin(), target.end());
  if (keep_highest && in.ndim() > 0) out[0] = in[0];
  std::vector<size_t> zeros;
  for (size_t i = keep_highest ? 1 : 0; i < out.size(); ++i) {
    if (out[i] == 0) zeros.push_back(i);
  }
  if (zeros.size() == 1) {
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) known *= i == zeros[0] ? 1 : out[i];
    if (known > 0 && in.Size() % known == 0) out[zeros[0]] = in.Size() / known;
  }
  const Shape shape(out.begin(), out.end());
  if (shape.Size() != in.Size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Reshape: cannot reshape array of shape ", in.ToString(), " (", in.Size(),
                     " elements) into target_shape ", SpecString(target),
                     keep_highest ? " with keep_highest" : "", ": that gives ", shape.ToString()));
  }
  return shape;
}

class ReshapeProp : public CopyPropBase<ReshapeProp, ReshapeParam> {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    if (param_.shape.empty() && param_.target_shape.empty()) {
      return absl::InvalidArgumentError(
          "Reshape: required parameter 'shape' is missing (or MXNet 0.8's target_shape)");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    ASSIGN_OR_RETURN(Shape target,
                     param_.shape.empty()
                         ? LegacyReshapeTarget(param_.target_shape, param_.keep_highest, data)
                         : ReshapeTarget(param_.shape, data, param_.reverse));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, target, out_shape));
    return true;
  }
  std::string TypeString() const override { return "Reshape"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(Flatten, FlattenProp)
    .Describe("Collapses all dimensions but the first: (d0, d1, ..., dn) -> (d0, d1*...*dn).")
    .AddAlias("flatten");
TESSERA_REGISTER_OP_PROPERTY(Reshape, ReshapeProp)
    .Describe("The same data under a new shape, with MXNet's special values 0, -1, -2, -3, -4.")
    .AddParams<ReshapeParam>()
    .AddAlias("reshape");

}  // namespace tessera::ops
