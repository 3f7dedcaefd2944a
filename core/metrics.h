// The process's Prometheus metrics: one registry every layer adds its families to, served
// by the daemons' metrics server (rpc/metrics_server.h). Families are built once, where the
// code that moves them lives, e.g.
//
//   prometheus::Counter& pushed = prometheus::BuildCounter()
//       .Name("tessera_kvstore_push_bytes_total").Help("...")
//       .Register(ProcessMetrics()).Add({});
//
// prometheus-cpp's metrics are lock-free to update and safe to use from any thread.
#ifndef TESSERA_CORE_METRICS_H_
#define TESSERA_CORE_METRICS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tessera {

// The registry of this process; it lives until the process exits.
prometheus::Registry& ProcessMetrics();

// Buckets for the latency of one request, 100 µs to 10 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets();

// `collectable` in Prometheus' text exposition format, as a scrape sees it.
std::string MetricsText(const prometheus::Collectable& collectable);

// The value of the counter or gauge `name` whose labels include `labels` (a histogram's:
// its sample count), summed over the metrics that match. NOT_FOUND when none does.
absl::StatusOr<double> MetricValue(const prometheus::Collectable& collectable,
                                   absl::string_view name,
                                   const std::map<std::string, std::string>& labels = {});

}  // namespace tessera

#endif  // TESSERA_CORE_METRICS_H_
