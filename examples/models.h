// Symbol builders for the networks the examples, tests and benchmarks share: MNIST's
// multi-layer perceptron and LeNet, as MXNet's examples define them, and ResNet-18 for
// CIFAR-sized (32x32) images.
#ifndef TESSERA_EXAMPLES_MODELS_H_
#define TESSERA_EXAMPLES_MODELS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/symbol.h"

namespace tessera::examples {

// data -> (FullyConnected(hidden) -> Activation(act))^num_hidden_layers ->
// FullyConnected(num_classes) -> SoftmaxOutput (label "softmax_label"). Layers are named
// fc1, relu1 (act1 for other activations), ..., and the head "softmax".
absl::StatusOr<graph::Symbol> Mlp(int num_hidden_layers, int hidden, int num_classes = 10,
                                  const char* act = "relu");
// The same with one width per hidden layer, e.g. {128, 64} for MNIST's 784-128-64-10.
absl::StatusOr<graph::Symbol> MlpWithWidths(const std::vector<int>& hidden, int num_classes = 10,
                                            const char* act = "relu");

// LeNet for 1x28x28 inputs: conv(5x5, 20) relu maxpool(2) conv(5x5, 50) relu maxpool(2)
// flatten fc(500) relu fc(num_classes) SoftmaxOutput. ReLU rather than the tanh of MXNet's
// example: on the 8,000-digit split tanh peaked at 97.35-97.55% within 5 epochs (PyTorch
// 1.13: 96.6-97.6%), ReLU at 97.8-98.0% (tests/train/mnist_train_test.cc).
absl::StatusOr<graph::Symbol> LeNet(int num_classes = 10);

// ResNet-18 for 32x32 images (He et al. 2015, basic blocks, the CIFAR variant PyTorch's
// CIFAR examples and torchvision's BasicBlock train): conv 3x3/64 stride 1 + BatchNorm +
// ReLU (no max-pool), then four stages of two basic blocks of 64, 128, 256 and 512 filters,
// the first block of stages 2-4 with stride 2 and a 1x1 conv + BatchNorm projection
// shortcut, then global average pooling, FullyConnected(num_classes) and SoftmaxOutput.
// A basic block is conv3x3-BN-ReLU-conv3x3-BN, ElementWiseSum with the shortcut, ReLU.
// Convolutions have no bias (BatchNorm follows each); BatchNorm has fix_gamma false, eps
// 2e-5 and momentum 0.9, as MXNet's resnet.py. Post-activation (v1) blocks rather than the
// pre-activation (v2) blocks of MXNet's symbols/resnet.py: the PyTorch peer of
// bench/gpu_train_bench is the common v1 CIFAR ResNet-18, and both sides must train the same
// network. Names follow MXNet's resnet-v1.py: conv0/bn0/relu0, stageS_unitU_{conv1, bn1,
// relu1, conv2, bn2, conv1sc, sc, plus, relu}, pool1, fc1, softmax. 11,173,962 parameters
// for 10 classes, plus 9,600 BatchNorm moving statistics.
absl::StatusOr<graph::Symbol> ResNet18Cifar(int num_classes = 10);

// The built-in models jobs name (proto/worker.proto JobSpec.model): "mlp" is
// MlpWithWidths({128, 64}), "lenet" is LeNet(), "resnet18_cifar" is ResNet18Cifar() (any
// input size and channel count bind: global pooling ends it). INVALID_ARGUMENT for another
// name, listing these.
std::vector<std::string> BuiltinModelNames();
absl::StatusOr<graph::Symbol> BuiltinModel(const std::string& name);

}  // namespace tessera::examples

#endif  // TESSERA_EXAMPLES_MODELS_H_
