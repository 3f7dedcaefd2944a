// Parameter initializers, as MXNet's mx.init: Xavier, Uniform, Normal, Constant, and
// Mixed, which picks one by the first regular expression matching the parameter's name.
//
// Every initializer follows MXNet's conventions by name before its own rule: biases,
// betas and moving means start at 0, gammas and moving variances at 1; only the other
// parameters (weights) get the initializer's distribution. Draws come from the runtime's
// CPU random generator (a GPU array is filled on the host, then copied), so a seeded runtime
// initializes identically every time, on every device.
#ifndef TESSERA_TRAIN_INITIALIZER_H_
#define TESSERA_TRAIN_INITIALIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ndarray/ndarray.h"

namespace tessera::train {

class Initializer {
 public:
  virtual ~Initializer() = default;
  // Fills `array` (the parameter `name`); pushed, returns at once.
  absl::Status operator()(const std::string& name, const NDArray& array) const;
  virtual std::string ToString() const = 0;

 protected:
  // The rule for weights.
  virtual absl::Status InitWeight(const std::string& name, const NDArray& array) const = 0;
};

// Uniform in [-scale, scale].
class Uniform : public Initializer {
 public:
  explicit Uniform(double scale = 0.07) : scale_(scale) {}
  std::string ToString() const override;

 private:
  absl::Status InitWeight(const std::string& name, const NDArray& array) const override;
  double scale_;
};

// Normal with mean 0 and standard deviation `sigma`.
class Normal : public Initializer {
 public:
  explicit Normal(double sigma = 0.01) : sigma_(sigma) {}
  std::string ToString() const override;

 private:
  absl::Status InitWeight(const std::string& name, const NDArray& array) const override;
  double sigma_;
};

// Every weight element `value` (the name conventions still apply to biases etc.).
class Constant : public Initializer {
 public:
  explicit Constant(double value) : value_(value) {}
  std::string ToString() const override;

 private:
  absl::Status InitWeight(const std::string& name, const NDArray& array) const override;
  double value_;
};

// Xavier/Glorot: scale = sqrt(magnitude / factor) with factor the fan-in, the fan-out or
// their average; uniform in [-scale, scale] or normal with sigma = scale.
class Xavier : public Initializer {
 public:
  enum class Distribution { kUniform, kGaussian };
  enum class Factor { kAvg, kIn, kOut };
  explicit Xavier(Distribution rnd = Distribution::kUniform, Factor factor = Factor::kAvg,
                  double magnitude = 3.0)
      : rnd_(rnd), factor_(factor), magnitude_(magnitude) {}
  std::string ToString() const override;

 private:
  absl::Status InitWeight(const std::string& name, const NDArray& array) const override;
  Distribution rnd_;
  Factor factor_;
  double magnitude_;
};

// The first initializer whose pattern (ECMAScript regex, matched against the whole name)
// matches; a name no pattern matches is INVALID_ARGUMENT naming it.
class Mixed : public Initializer {
 public:
  using Rule = std::pair<std::string, std::shared_ptr<const Initializer>>;
  static absl::StatusOr<std::unique_ptr<Mixed>> Create(std::vector<Rule> rules);
  std::string ToString() const override;

 private:
  struct CompiledRule;
  explicit Mixed(std::vector<std::shared_ptr<const CompiledRule>> rules) : rules_(std::move(rules)) {}
  absl::Status InitWeight(const std::string& name, const NDArray& array) const override;
  std::vector<std::shared_ptr<const CompiledRule>> rules_;
};

// Initializers by the names jobs use (proto/worker.proto JobSpec.initializer), with their
// default arguments: "xavier" (also for ""), "uniform", "normal". INVALID_ARGUMENT for
// another name, listing these.
std::vector<std::string> InitializerNames();
absl::StatusOr<std::shared_ptr<const Initializer>> CreateInitializer(const std::string& name);

}  // namespace tessera::train

#endif  // TESSERA_TRAIN_INITIALIZER_H_
