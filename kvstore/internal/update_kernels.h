// The optimizers' elementwise CPU update kernels over float32, with exactly the arithmetic
// of MXNet 1.x's src/operator/optimizer_op-inl.h (SGDKernel, SGDMomKernel, AdamUpdateKernel,
// RMSPropUpdateKernel, RMSPropAlexUpdateKernel) and of the AdaGrad update in its
// python/mxnet/optimizer.py. MXNet casts every hyperparameter to the weight's dtype before
// the kernel, so they are floats here too; a clip bound < 0 means no clipping. Also the sum
// a parameter server merges a round's pushes with.
//
// Plain elementwise loops that the compiler vectorizes (with the cost model of the BUILD's
// copts: no reassociation, so the same bits as scalar code); run them inside an engine
// function. Stateless.
#ifndef TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_H_
#define TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_H_

#include <cstdint>

namespace tessera::kvstore::internal {

// out += in, elementwise: a parameter server summing a round's pushes.
void AddTo(int64_t n, const float* in, float* out);

struct SgdHyper {
  float lr = 0, wd = 0, rescale_grad = 1, clip_gradient = -1, momentum = 0;
};
// weight = (1 - lr*wd) * weight - lr * clip(rescale_grad * grad)
void SgdUpdate(int64_t n, const SgdHyper& h, const float* grad, float* weight);
// mom = momentum*mom - lr*wd*weight - lr * clip(rescale_grad * grad); weight += mom
void SgdMomUpdate(int64_t n, const SgdHyper& h, const float* grad, float* weight, float* mom);

struct AdamHyper {
  float lr = 0, wd = 0, rescale_grad = 1, clip_gradient = -1, beta1 = 0, beta2 = 0, epsilon = 0;
};
// g = clip(rescale_grad*grad + wd*weight); mean = beta1*mean + (1-beta1)*g;
// var = beta2*var + (1-beta2)*g*g; weight -= lr * mean / (sqrt(var) + epsilon)
// (lr already carries the bias correction).
void AdamUpdate(int64_t n, const AdamHyper& h, const float* grad, float* weight, float* mean,
                float* var);

struct RmsPropHyper {
  float lr = 0, wd = 0, rescale_grad = 1, clip_gradient = -1, gamma1 = 0, gamma2 = 0, epsilon = 0,
        clip_weights = -1;
};
// Tieleman & Hinton: g = clip(rescale_grad*grad + wd*weight); n = (1-gamma1)*g*g + gamma1*n;
// weight = clip_w(weight - lr * g / sqrt(n + epsilon))
void RmsPropUpdate(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                   float* state_n);
// Graves 2013 (centered): n as above; g_avg = (1-gamma1)*g + gamma1*g_avg;
// delta = gamma2*delta - lr * g / sqrt(n - g_avg^2 + epsilon); weight = clip_w(weight + delta)
void RmsPropCenteredUpdate(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                           float* state_n, float* state_g, float* delta);

struct AdaGradHyper {
  float lr = 0, wd = 0, rescale_grad = 1, clip_gradient = -1, eps = 0;
};
// g = clip(grad * rescale_grad); history += g*g; div = g / sqrt(history + eps);
// weight += (div + weight*wd) * -lr
void AdaGradUpdate(int64_t n, const AdaGradHyper& h, const float* grad, float* weight,
                   float* history);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_H_
