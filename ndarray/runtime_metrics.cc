#include "ndarray/runtime_metrics.h"

#include <string>

namespace tessera {
namespace {

prometheus::MetricFamily Gauge(std::string name, std::string help) {
  return {std::move(name), std::move(help), prometheus::MetricType::Gauge, {}};
}

prometheus::ClientMetric GaugeValue(double value,
                                    std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  return metric;
}

}  // namespace

std::vector<prometheus::MetricFamily> RuntimeMetrics::Collect() const {
  prometheus::MetricFamily pending =
      Gauge("tessera_engine_pending_functions",
            "Functions pushed to the engine and not finished (waiting, queued or running)");
  pending.metric.push_back(GaugeValue(static_cast<double>(runtime_.engine->pending_functions())));

  prometheus::MetricFamily in_use =
      Gauge("tessera_memory_in_use_bytes", "Storage blocks handed out and not freed, per device");
  prometheus::MetricFamily pooled =
      Gauge("tessera_memory_pooled_bytes", "Freed storage blocks kept for reuse, per device");
  for (const Context& device : runtime_.storage->Devices()) {
    const engine::StorageStats stats = runtime_.storage->Stats(device);
    const std::vector<prometheus::ClientMetric::Label> labels = {{"device", device.ToString()}};
    in_use.metric.push_back(GaugeValue(static_cast<double>(stats.bytes_in_use), labels));
    pooled.metric.push_back(GaugeValue(static_cast<double>(stats.bytes_pooled), labels));
  }
  return {std::move(pending), std::move(in_use), std::move(pooled)};
}

}  // namespace tessera
