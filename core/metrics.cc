#include "core/metrics.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace tessera {

prometheus::Registry& ProcessMetrics() {
  static auto* registry = new prometheus::Registry();  // never destroyed: used until exit
  return *registry;
}

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
          0.05, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};
}

std::string MetricsText(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

absl::StatusOr<double> MetricValue(const prometheus::Collectable& collectable,
                                   absl::string_view name,
                                   const std::map<std::string, std::string>& labels) {
  bool found = false;
  double sum = 0;
  for (const prometheus::MetricFamily& family : collectable.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      bool matches = true;
      for (const auto& [key, value] : labels) {
        bool has = false;
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          has = has || (label.name == key && label.value == value);
        }
        matches = matches && has;
      }
      if (!matches) continue;
      found = true;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          sum += metric.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          sum += metric.gauge.value;
          break;
        case prometheus::MetricType::Histogram:
          sum += static_cast<double>(metric.histogram.sample_count);
          break;
        default:
          sum += metric.untyped.value;
      }
    }
  }
  if (!found) return absl::NotFoundError(absl::StrCat("no metric ", name, " with those labels"));
  return sum;
}

}  // namespace tessera
