// Symbol builders for the networks the examples, tests and benchmarks share: MNIST's
// multi-layer perceptron and LeNet, as MXNet's examples define them.
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

// The built-in models jobs name (proto/worker.proto JobSpec.model): "mlp" is
// MlpWithWidths({128, 64}), "lenet" is LeNet(). INVALID_ARGUMENT for another name, listing
// these.
std::vector<std::string> BuiltinModelNames();
absl::StatusOr<graph::Symbol> BuiltinModel(const std::string& name);

}  // namespace tessera::examples

#endif  // TESSERA_EXAMPLES_MODELS_H_
