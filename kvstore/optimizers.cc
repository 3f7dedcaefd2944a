// The concrete optimizers (SGD, Adam, RMSProp, AdaGrad) and Optimizer::Create, the one
// place they are chosen by name. Parameters and defaults are MXNet 1.x's Python optimizers'.
// Each update is one engine push of a CPU loop (internal/update_kernels.h) or, for a weight
// on a GPU, of the same arithmetic as a device kernel (internal/update_kernels_gpu.h).
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "kvstore/internal/update_kernel.h"
#include "kvstore/optimizer.h"

namespace tessera::kvstore {
namespace {

using ops::KwArgs;
using ops::ParamSchema;

// One engine push of `kernel` on the weight's device (weight and states mutated, grad read):
// the host loop for a CPU weight, the device kernel on the run context's stream for a GPU
// one. The engine orders the launch after the states' creation and the grad's writers
// (events across streams), so nothing here waits on the device.
template <typename Kernel>
absl::Status PushKernel(int index, const NDArray& weight, const NDArray& grad,
                        const std::vector<NDArray>& states, int priority, Kernel kernel) {
  std::vector<engine::VarHandle> mutate{weight.var()};
  std::vector<float*> s;
  for (const NDArray& state : states) {
    mutate.push_back(state.var());
    s.push_back(state.data().data<float>());
  }
  float* w = weight.data().data<float>();
  const float* g = grad.data().data<float>();
  const int64_t n = weight.Size();
  const Context ctx = weight.ctx();
  engine::Engine* eng = weight.runtime().engine;
  const char* name = Kernel::kName;
  if (!ctx.is_gpu()) {
    return eng->PushSync(
        [kernel, n, g, w, s](engine::RunContext) {
          kernel.Cpu(n, g, w, s.data());
          return absl::OkStatus();
        },
        ctx, {grad.var()}, mutate, engine::FnProperty::kNormal, priority, name);
  }
#if TESSERA_USE_CUDA
  return eng->PushSync(
      [kernel, n, g, w, s, name, index, ctx](engine::RunContext rctx) -> absl::Status {
        const cudaError_t err = kernel.Gpu(n, g, w, s.data(), rctx.get_stream<cudaStream_t>());
        if (err == cudaSuccess) return absl::OkStatus();
        return absl::InternalError(
            absl::StrCat(name, ": index ", index, " on ", ctx.ToString(), ", float32, ", n,
                         " elements: kernel launch failed: ", cudaGetErrorName(err), " (",
                         cudaGetErrorString(err), ")"));
      },
      ctx, {grad.var()}, mutate, engine::FnProperty::kNormal, priority, name);
#else
  // CheckUpdate refuses GPU weights first in such a build; kept so no path reaches a kernel.
  return absl::FailedPreconditionError(absl::StrCat(name, ": index ", index, " on ", ctx.ToString(),
                                                    ": Tessera was built without CUDA"));
#endif
}

bool Given(const KwArgs& params, const char* key) {
  for (const auto& [k, v] : params) {
    if (k == key) return true;
  }
  return false;
}

absl::Status Invalid(const char* optimizer, const char* param, double value, const char* rule) {
  return absl::InvalidArgumentError(
      absl::StrCat(optimizer, ": invalid value '", value, "' for parameter '", param, "': ", rule));
}

// The fields every optimizer has, in one place.
template <typename P>
void CommonFields(ParamSchema<P>* s) {
  s->Field("learning_rate", &P::learning_rate).Lower(0).Describe("the step size");
  s->Field("wd", &P::wd).Lower(0).Describe("weight decay (L2 penalty)");
  s->Field("rescale_grad", &P::rescale_grad).Lower(0).Describe("gradient scale, e.g. 1/batch");
  s->Field("clip_gradient", &P::clip_gradient).Describe("clip to [-c, c]; < 0 turns it off");
}

// ---- SGD ----

struct SgdParam {
  double learning_rate = 0.01, wd = 0, rescale_grad = 1, clip_gradient = -1, momentum = 0;
  static const ParamSchema<SgdParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<SgdParam>("sgd");
      CommonFields(s);
      s->Field("momentum", &SgdParam::momentum).Range(0, 1).Describe("momentum; 0 keeps no state");
      return s;
    }();
    return *schema;
  }
};

class Sgd : public Optimizer {
 public:
  Sgd(const SgdParam& p, bool lr_given)
      : Optimizer("sgd", p.learning_rate, lr_given, p.wd), p_(p) {}

 protected:
  // MXNet creates no momentum state for momentum 0 and runs sgd_update then.
  int NumStates() const override { return p_.momentum > 0 ? 1 : 0; }
  internal::UpdateKernel KernelFor(const Step& step) const override {
    internal::SgdHyper h;
    h.lr = static_cast<float>(step.lr);
    h.wd = static_cast<float>(step.wd);
    h.rescale_grad = static_cast<float>(p_.rescale_grad);
    h.clip_gradient = static_cast<float>(p_.clip_gradient);
    h.momentum = static_cast<float>(p_.momentum);
    if (NumStates() == 0) return internal::SgdKernel{h};
    return internal::SgdMomKernel{h};
  }

 private:
  SgdParam p_;
};

// ---- Adam ----

struct AdamParam {
  double learning_rate = 0.001, wd = 0, rescale_grad = 1, clip_gradient = -1;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  static const ParamSchema<AdamParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<AdamParam>("adam");
      CommonFields(s);
      s->Field("beta1", &AdamParam::beta1).Range(0, 1).Describe("first-moment decay, < 1");
      s->Field("beta2", &AdamParam::beta2).Range(0, 1).Describe("second-moment decay, < 1");
      s->Field("epsilon", &AdamParam::epsilon).Lower(0).Describe("added to sqrt(var)");
      return s;
    }();
    return *schema;
  }
};

class Adam : public Optimizer {
 public:
  Adam(const AdamParam& p, bool lr_given)
      : Optimizer("adam", p.learning_rate, lr_given, p.wd), p_(p) {}

 protected:
  int NumStates() const override { return 2; }  // mean, var
  internal::UpdateKernel KernelFor(const Step& step) const override {
    // Bias correction in the rate, in double, as MXNet's Python Adam.update.
    const double t = static_cast<double>(step.t);
    const double coef1 = 1.0 - std::pow(p_.beta1, t);
    const double coef2 = 1.0 - std::pow(p_.beta2, t);
    internal::AdamHyper h;
    h.lr = static_cast<float>(step.lr * std::sqrt(coef2) / coef1);
    h.wd = static_cast<float>(step.wd);
    h.rescale_grad = static_cast<float>(p_.rescale_grad);
    h.clip_gradient = static_cast<float>(p_.clip_gradient);
    h.beta1 = static_cast<float>(p_.beta1);
    h.beta2 = static_cast<float>(p_.beta2);
    h.epsilon = static_cast<float>(p_.epsilon);
    return internal::AdamKernel{h};
  }

 private:
  AdamParam p_;
};

// ---- RMSProp ----

struct RmsPropParam {
  double learning_rate = 0.001, wd = 0, rescale_grad = 1, clip_gradient = -1;
  double gamma1 = 0.9, gamma2 = 0.9, epsilon = 1e-8, clip_weights = -1;
  bool centered = false;
  static const ParamSchema<RmsPropParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<RmsPropParam>("rmsprop");
      CommonFields(s);
      s->Field("gamma1", &RmsPropParam::gamma1).Range(0, 1).Describe("decay of the mean square");
      s->Field("gamma2", &RmsPropParam::gamma2).Range(0, 1).Describe("momentum (centered only)");
      s->Field("epsilon", &RmsPropParam::epsilon).Lower(0).Describe("added under the sqrt");
      s->Field("centered", &RmsPropParam::centered).Describe("Graves 2013 instead of Hinton's");
      s->Field("clip_weights", &RmsPropParam::clip_weights)
          .Describe("clip weights to [-c, c]; < 0 turns it off");
      return s;
    }();
    return *schema;
  }
};

class RmsProp : public Optimizer {
 public:
  RmsProp(const RmsPropParam& p, bool lr_given)
      : Optimizer("rmsprop", p.learning_rate, lr_given, p.wd), p_(p) {}

 protected:
  int NumStates() const override { return p_.centered ? 3 : 1; }  // n [, g, delta]
  internal::UpdateKernel KernelFor(const Step& step) const override {
    internal::RmsPropHyper h;
    h.lr = static_cast<float>(step.lr);
    h.wd = static_cast<float>(step.wd);
    h.rescale_grad = static_cast<float>(p_.rescale_grad);
    h.clip_gradient = static_cast<float>(p_.clip_gradient);
    h.gamma1 = static_cast<float>(p_.gamma1);
    h.gamma2 = static_cast<float>(p_.gamma2);
    h.epsilon = static_cast<float>(p_.epsilon);
    h.clip_weights = static_cast<float>(p_.clip_weights);
    if (!p_.centered) return internal::RmsPropKernel{h};
    return internal::RmsPropCenteredKernel{h};
  }

 private:
  RmsPropParam p_;
};

// ---- AdaGrad ----

struct AdaGradParam {
  double learning_rate = 0.01, wd = 0, rescale_grad = 1, clip_gradient = -1, eps = 1e-7;
  static const ParamSchema<AdaGradParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<AdaGradParam>("adagrad");
      CommonFields(s);
      s->Field("eps", &AdaGradParam::eps).Lower(0).Describe("added to the history under the sqrt");
      return s;
    }();
    return *schema;
  }
};

class AdaGrad : public Optimizer {
 public:
  AdaGrad(const AdaGradParam& p, bool lr_given)
      : Optimizer("adagrad", p.learning_rate, lr_given, p.wd), p_(p) {}

 protected:
  int NumStates() const override { return 1; }  // history
  internal::UpdateKernel KernelFor(const Step& step) const override {
    internal::AdaGradHyper h;
    h.lr = static_cast<float>(step.lr);
    h.wd = static_cast<float>(step.wd);
    h.rescale_grad = static_cast<float>(p_.rescale_grad);
    h.clip_gradient = static_cast<float>(p_.clip_gradient);
    h.eps = static_cast<float>(p_.eps);
    return internal::AdaGradKernel{h};
  }

 private:
  AdaGradParam p_;
};

template <typename Opt, typename P>
absl::StatusOr<std::unique_ptr<Optimizer>> Make(const KwArgs& params,
                                                absl::Status (*check)(const P&) = nullptr) {
  P p;
  RETURN_IF_ERROR(P::Schema().Init(&p, params));
  if (check != nullptr) RETURN_IF_ERROR(check(p));
  return std::unique_ptr<Optimizer>(new Opt(p, Given(params, "learning_rate")));
}

absl::Status CheckAdam(const AdamParam& p) {
  // beta = 1 would divide the bias correction by zero.
  if (p.beta1 >= 1) return Invalid("adam", "beta1", p.beta1, "must be < 1");
  if (p.beta2 >= 1) return Invalid("adam", "beta2", p.beta2, "must be < 1");
  return absl::OkStatus();
}

}  // namespace

absl::Status Optimizer::PushUpdate(const Step& step, const NDArray& weight, const NDArray& grad,
                                   const std::vector<NDArray>& states, int priority) const {
  return std::visit(
      [&](const auto& kernel) {
        return PushKernel(step.index, weight, grad, states, priority, kernel);
      },
      KernelFor(step));
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const std::string& name,
                                                             const ops::KwArgs& params) {
  // Case-insensitive, as MXNet's registry.
  const std::string lower = absl::AsciiStrToLower(name);
  absl::StatusOr<std::unique_ptr<Optimizer>> made;
  if (lower == "sgd") {
    made = Make<Sgd, SgdParam>(params);
  } else if (lower == "adam") {
    made = Make<Adam, AdamParam>(params, &CheckAdam);
  } else if (lower == "rmsprop") {
    made = Make<RmsProp, RmsPropParam>(params);
  } else if (lower == "adagrad") {
    made = Make<AdaGrad, AdaGradParam>(params);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer \"", name, "\" (known: sgd, adam, rmsprop, adagrad)"));
  }
  if (made.ok()) (*made)->params_ = params;
  return made;
}

}  // namespace tessera::kvstore
