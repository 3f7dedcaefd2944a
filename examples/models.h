// Symbol builders for the networks the examples, tests and benchmarks share: MNIST's
// multi-layer perceptron and LeNet, as MXNet's examples define them, ResNet-18 for
// CIFAR-sized (32x32) images, and ImageNet's ResNet-50 and VGG-16 and an embedding-heavy
// network, whose parameter shapes the communication benchmarks push.
#ifndef TESSERA_EXAMPLES_MODELS_H_
#define TESSERA_EXAMPLES_MODELS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/symbol.h"
#include "core/shape.h"

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

// ResNet-50 for 224x224 images (He et al. 2015; MXNet's resnet-v1 with 50 layers, torchvision's
// resnet50): conv 7x7/64 stride 2 + BatchNorm + ReLU + max-pool 3x3 stride 2, then four
// stages of 3, 4, 6 and 3 bottleneck blocks of 256, 512, 1,024 and 2,048 filters (1x1 of a
// quarter of them, 3x3 with the stage's stride 2 from stage 2, 1x1; the first block of each
// stage with a 1x1 conv + BatchNorm projection shortcut), global average pooling,
// FullyConnected(num_classes) and SoftmaxOutput. BatchNorm and names as ResNet18Cifar's
// (stageS_unitU_conv3, _bn3 for the third layer). 25,557,032 parameters for 1,000 classes.
absl::StatusOr<graph::Symbol> ResNet50(int num_classes = 1000);

// VGG-16 (Simonyan and Zisserman 2015, configuration D; MXNet's vgg16 without BatchNorm): 13
// 3x3 convolutions with bias (64, 64, 128, 128, 3 x 256, 3 x 512, 3 x 512), each followed
// by ReLU, a 2x2 max-pool after each group; then FullyConnected 4096 + ReLU + Dropout(0.5)
// twice and FullyConnected(num_classes). Names conv{G}_{I}, pool{G}, fc6..fc8.
// 138,357,544 parameters for 1,000 classes at 224x224.
absl::StatusOr<graph::Symbol> Vgg16(int num_classes = 1000);

// An embedding-heavy network, as click-through models are: `data` holds rows of ids into an
// Embedding(vocabulary x embedding), flattened into FullyConnected 256 + ReLU, 128 + ReLU and
// FullyConnected(num_classes). The table dominates its bytes (32 M of 32.2 M parameters with
// the defaults and 16 ids per row); a dense KVStore pushes it whole each round.
absl::StatusOr<graph::Symbol> EmbeddingMlp(int vocabulary = 1000000, int embedding = 32,
                                           int num_classes = 2);

// The trained parameters of `net` (its arguments but the inputs named in `inputs` and the
// labels, "*_label") in ListArguments order, with the shapes `inputs` give them.
// INVALID_ARGUMENT naming the first whose shape does not follow.
absl::StatusOr<std::vector<std::pair<std::string, Shape>>> ParameterShapes(
    const graph::Symbol& net, const std::map<std::string, Shape>& inputs);

// The forward pass's floating-point operations attributable to each of ParameterShapes'
// parameters (same order), for a simulated compute time split as the layers' work is: a
// Convolution's, Deconvolution's or FullyConnected's weight 2 x its elements x the positions
// it is applied at (the output's elements per channel); any other parameter the elements of
// the output of the node using it (an elementwise pass: a bias, BatchNorm's gamma and beta,
// an Embedding's lookups).
absl::StatusOr<std::vector<double>> ParameterFlops(const graph::Symbol& net,
                                                   const std::map<std::string, Shape>& inputs);

// The built-in models jobs name (proto/worker.proto JobSpec.model): "mlp" is
// MlpWithWidths({128, 64}), "lenet" is LeNet(), "resnet18_cifar" is ResNet18Cifar() (any
// input size and channel count bind: global pooling ends it). INVALID_ARGUMENT for another
// name, listing these.
std::vector<std::string> BuiltinModelNames();
absl::StatusOr<graph::Symbol> BuiltinModel(const std::string& name);

}  // namespace tessera::examples

#endif  // TESSERA_EXAMPLES_MODELS_H_
