// A runtime's state as Prometheus metrics, read when scraped: the engine's pending functions
// and, per device, the storage pool's bytes in use and pooled.
#ifndef TESSERA_NDARRAY_RUNTIME_METRICS_H_
#define TESSERA_NDARRAY_RUNTIME_METRICS_H_

#include <vector>

#include "ndarray/runtime.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace tessera {

class RuntimeMetrics final : public prometheus::Collectable {
 public:
  // `runtime`'s engine and storage must outlive this object.
  explicit RuntimeMetrics(Runtime runtime) : runtime_(runtime) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Runtime runtime_;
};

}  // namespace tessera

#endif  // TESSERA_NDARRAY_RUNTIME_METRICS_H_
