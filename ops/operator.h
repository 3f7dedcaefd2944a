// The operator API from the seeds: Operator computes (Forward/Backward on TBlobs), and
// OperatorProperty describes (parameters, argument names, shape and type inference,
// resources, backward dependencies, in-place options) and creates Operators per device.
//
// Differences from MXNet, on purpose: every call returns absl::Status (or StatusOr) instead
// of throwing; InferShape/InferType return false when not enough is known and an error when
// what is known is inconsistent; in-place options are pairs of ids on both sides.
//
// Thread safety: an OperatorProperty is immutable after Init and may be shared by threads.
// An Operator may keep per-shape caches (oneDNN primitives), so one Operator must not run
// two calls at once; the engine guarantees that by giving each Operator an engine variable.
#ifndef TESSERA_OPS_OPERATOR_H_
#define TESSERA_OPS_OPERATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "engine/engine.h"
#include "engine/resource.h"
#include "ops/param.h"

namespace tessera::ops {

using engine::Resource;
using engine::ResourceRequest;

struct OpContext {
  bool is_train = false;
  engine::RunContext run_ctx;
  // The resources ForwardResource/BackwardResource asked for, in that order.
  std::vector<Resource> requested;
};

class Operator {
 public:
  virtual ~Operator() = default;

  // `req[i]` says how to write `out_data[i]`. Shapes and types are the inferred ones.
  virtual absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                               const std::vector<OpReqType>& req,
                               const std::vector<TBlob>& out_data,
                               const std::vector<TBlob>& aux_states) = 0;

  // Computes `in_grad` (one per argument, written per `req`) from the tensors that
  // DeclareBackwardDependency asked for; the others may be empty blobs. `out_grad` has one
  // entry per visible output. As in MXNet's executor, Backward follows the training
  // Forward (is_train) of the same Operator on the same in_data, and may use what that
  // Forward kept (ConvOp keeps its reordered input): a caller that changes in_data between
  // the two runs Forward again.
  virtual absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                                const std::vector<TBlob>& in_data,
                                const std::vector<TBlob>& out_data,
                                const std::vector<OpReqType>& req,
                                const std::vector<TBlob>& in_grad,
                                const std::vector<TBlob>& aux_states);
};

class OperatorProperty {
 public:
  virtual ~OperatorProperty() = default;

  // Parses string parameters into the typed parameter struct (ParamSchema::Init).
  virtual absl::Status Init(const KwArgs& kwargs) = 0;
  virtual std::map<std::string, std::string> GetParams() const = 0;

  virtual std::vector<std::string> ListArguments() const { return {"data"}; }
  virtual std::vector<std::string> ListOutputs() const { return {"output"}; }
  virtual std::vector<std::string> ListAuxiliaryStates() const { return {}; }
  virtual int NumOutputs() const { return static_cast<int>(ListOutputs().size()); }
  // Outputs beyond this count are internal (e.g. a saved mask) and hidden from users.
  virtual int NumVisibleOutputs() const { return NumOutputs(); }

  // Fills the unknown shapes it can. Returns false when too little is known yet, an
  // INVALID_ARGUMENT error naming the operator, the argument and the shapes when the known
  // ones are inconsistent. Vectors arrive sized to ListArguments/NumOutputs/aux.
  virtual absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape,
                                          std::vector<Shape>* out_shape,
                                          std::vector<Shape>* aux_shape) const = 0;
  // Default: every input, output and aux state has the type of the first known one.
  virtual absl::StatusOr<bool> InferType(std::vector<DType>* in_type,
                                         std::vector<DType>* out_type,
                                         std::vector<DType>* aux_type) const;

  virtual std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>& in_shape) const {
    return {};
  }
  virtual std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>& in_shape) const {
    return {};
  }

  // The ids (from the three lists) Backward reads. Default: all of them.
  virtual std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                     const std::vector<int>& in_data,
                                                     const std::vector<int>& out_data) const;
  // Pairs (input id, output id) that may share memory: a hint, never a requirement.
  virtual std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const {
    return {};
  }
  virtual std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const {
    return {};
  }

  // An Operator for `ctx`; UNIMPLEMENTED naming the op and device when there is no kernel.
  virtual absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const = 0;
  // Whether this build has a kernel of this operator for `device` (without touching one):
  // every operator has a CPU kernel; a GPU kernel is a factory registered by ops/cuda.
  virtual bool HasKernel(DeviceType device) const;

  virtual std::unique_ptr<OperatorProperty> Copy() const = 0;
  // The registered name, e.g. "Convolution".
  virtual std::string TypeString() const = 0;
};

// The CRTP base most properties use: Init/GetParams through the parameter struct's schema,
// Copy through the copy constructor. `Derived` has a member `param_` of type `Param`.
template <typename Derived, typename Param>
class PropertyWithParam : public OperatorProperty {
 public:
  absl::Status Init(const KwArgs& kwargs) override { return Param::Schema().Init(&param_, kwargs); }
  std::map<std::string, std::string> GetParams() const override {
    return Param::Schema().Get(param_);
  }
  std::unique_ptr<OperatorProperty> Copy() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
  const Param& param() const { return param_; }

 protected:
  Param param_;
};

// A parameter struct for operators with none.
struct NoParam {
  static const ParamSchema<NoParam>& Schema();
};

// GPU kernels live in ops/cuda and register a factory per operator name here, so the
// properties (ops/nn, ops/tensor, ...) hold no CUDA code: their CreateOperator returns
// CreateGpuOperator(*this, ctx) for a GPU context. Registration happens at static
// initialization; lookups afterwards from any thread.
using GpuOperatorFactory = std::function<absl::StatusOr<std::unique_ptr<Operator>>(
    const OperatorProperty& prop, Context ctx)>;
void RegisterGpuOperator(const std::string& op, GpuOperatorFactory factory);
// The registered GPU operator for prop.TypeString(); UNIMPLEMENTED naming the operator and
// device when this build has none (e.g. built without CUDA).
absl::StatusOr<std::unique_ptr<Operator>> CreateGpuOperator(const OperatorProperty& prop,
                                                            Context ctx);
// Whether a GPU factory is registered for operator `op`.
bool HasGpuOperator(const std::string& op);

// Which list of a property a shape belongs to, for error messages.
enum class Slot { kArgument, kOutput, kAux };

// Merges `expected` into `(*shapes)[index]` during inference; on a conflict, the standard
// error: "<op>: shape mismatch for argument 'weight': expected (64,784), got (64,100)".
absl::Status AssignShape(const OperatorProperty& prop, Slot slot, int index,
                         const Shape& expected, std::vector<Shape>* shapes);

}  // namespace tessera::ops

#endif  // TESSERA_OPS_OPERATOR_H_
