#include "client/run_report.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "engine/create_engine.h"
#include "ndarray/runtime.h"
#include "ndarray/serialization.h"
#include "nlohmann/json.hpp"

namespace tessera::client {
namespace {

// The shortest text that reads back as `v` (std::to_chars' round-trip guarantee).
std::string Number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(v);
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Axis ticks at 1, 2 or 5 times a power of ten, about `target` of them, covering [lo, hi].
struct Ticks {
  double lo, hi, step;  // the axis runs from lo to hi
  double first;         // the first tick
  int decimals;         // enough to tell the ticks apart
};

Ticks NiceTicks(double lo, double hi, int target, bool integers) {
  if (integers && !(hi > lo)) {
    // One epoch: centred, with its tick alone.
    return {.lo = lo - 0.5, .hi = lo + 0.5, .step = 1, .first = lo, .decimals = 0};
  }
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  if (integers) step = std::max(1.0, std::round(step));
  Ticks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  t.first = t.lo;
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return t;
}

// Loss first, accuracy second, the rest by name.
int Rank(const std::string& metric) {
  if (metric == "cross-entropy") return 0;
  if (metric == "accuracy") return 1;
  return 2;
}

std::string PanelLabel(const std::string& metric) {
  return metric == "cross-entropy" ? "cross-entropy (loss)" : metric;
}

constexpr double kWidth = 760;
constexpr double kLeft = 80, kRight = 140, kTop = 56, kPanelHeight = 240, kGap = 64, kBottom = 56;
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kEvalColor = "#d62728";

struct Series {
  const char* name;  // "train" / "eval"
  const char* color;
  const char* dash;                               // stroke-dasharray, "" for solid
  std::vector<std::pair<double, double>> points;  // (epoch, value), finite values only
};

}  // namespace

absl::Status WriteMetricsCsv(const std::string& path, const std::vector<EpochRow>& rows) {
  std::set<std::string> train, eval;
  for (const EpochRow& r : rows) {
    for (const auto& [name, value] : r.train) train.insert(name);
    for (const auto& [name, value] : r.eval) eval.insert(name);
  }
  std::string csv = "epoch,seconds,samples_per_second";
  for (const std::string& m : train) absl::StrAppend(&csv, ",train_", m);
  for (const std::string& m : eval) absl::StrAppend(&csv, ",eval_", m);
  csv += "\n";
  auto cells = [&csv](const std::set<std::string>& names,
                      const std::map<std::string, double>& values) {
    for (const std::string& m : names) {
      csv += ",";
      if (auto it = values.find(m); it != values.end()) csv += Number(it->second);
    }
  };
  for (const EpochRow& r : rows) {
    absl::StrAppend(&csv, r.epoch, ",", Number(r.seconds), ",", Number(r.samples_per_second));
    cells(train, r.train);
    cells(eval, r.eval);
    csv += "\n";
  }
  return WriteFileAtomically(path, csv);
}

absl::Status WritePlotSvg(const std::string& path, const std::vector<EpochRow>& rows,
                          const std::string& title) {
  std::vector<std::string> metrics;
  {
    std::set<std::string> names;
    for (const EpochRow& r : rows) {
      for (const auto& [name, value] : r.train) names.insert(name);
      for (const auto& [name, value] : r.eval) names.insert(name);
    }
    metrics.assign(names.begin(), names.end());
    std::stable_sort(metrics.begin(), metrics.end(),
                     [](const std::string& a, const std::string& b) { return Rank(a) < Rank(b); });
  }
  const int panels = std::max<int>(1, metrics.size());
  const double height = kTop + panels * kPanelHeight + (panels - 1) * kGap + kBottom;
  const double plot_width = kWidth - kLeft - kRight;

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
      "%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, height, kWidth, height);
  absl::StrAppend(&svg, "<title>", XmlEscape(title), "</title>\n");
  absl::StrAppend(&svg, "<rect x=\"0\" y=\"0\" width=\"", kWidth, "\" height=\"", height,
                  "\" fill=\"white\"/>\n");
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
                        "font-weight=\"bold\">%s</text>\n",
                        kWidth / 2, XmlEscape(title));
  if (metrics.empty()) {
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          kWidth / 2, kTop + kPanelHeight / 2,
                          rows.empty() ? "no epochs yet" : "no metrics");
    svg += "</svg>\n";
    return WriteFileAtomically(path, svg);
  }

  // One x axis for every panel: the epochs.
  double min_epoch = rows.front().epoch, max_epoch = rows.front().epoch;
  for (const EpochRow& r : rows) {
    min_epoch = std::min<double>(min_epoch, r.epoch);
    max_epoch = std::max<double>(max_epoch, r.epoch);
  }
  const Ticks xt = NiceTicks(min_epoch, max_epoch, 8, /*integers=*/true);

  bool any_train = false, any_eval = false;
  for (size_t p = 0; p < metrics.size(); ++p) {
    const std::string& metric = metrics[p];
    const double top = kTop + p * (kPanelHeight + kGap), bottom = top + kPanelHeight;
    Series series[2] = {{"train", kTrainColor, "", {}}, {"eval", kEvalColor, "6,3", {}}};
    double lo = INFINITY, hi = -INFINITY;
    for (const EpochRow& r : rows) {
      for (int s = 0; s < 2; ++s) {
        const auto& values = s == 0 ? r.train : r.eval;
        auto it = values.find(metric);
        if (it == values.end() || !std::isfinite(it->second)) continue;
        series[s].points.emplace_back(r.epoch, it->second);
        lo = std::min(lo, it->second);
        hi = std::max(hi, it->second);
      }
    }
    if (!(lo <= hi)) lo = 0, hi = 1;  // only non-finite values
    const Ticks yt = NiceTicks(lo, hi, 5, /*integers=*/false);
    auto X = [&](double epoch) { return kLeft + (epoch - xt.lo) / (xt.hi - xt.lo) * plot_width; };
    auto Y = [&](double v) { return bottom - (v - yt.lo) / (yt.hi - yt.lo) * kPanelHeight; };

    absl::StrAppendFormat(&svg, "<g class=\"panel\" id=\"panel-%s\">\n", XmlEscape(metric));
    // Grid and ticks.
    for (int i = 0; xt.first + i * xt.step <= xt.hi + xt.step * 1e-6; ++i) {
      const double e = xt.first + i * xt.step, x = X(e);
      absl::StrAppendFormat(
          &svg,
          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e0e0e0\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.0f</text>\n",
          x, top, x, bottom, x, bottom + 16, e);
    }
    for (int i = 0; yt.first + i * yt.step <= yt.hi + yt.step * 1e-6; ++i) {
      const double v = yt.first + i * yt.step, y = Y(v);
      absl::StrAppendFormat(
          &svg,
          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e0e0e0\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%.*f</text>\n",
          kLeft, y, kLeft + plot_width, y, kLeft - 6, y + 4, yt.decimals, v);
    }
    // Axes and their labels.
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                          "fill=\"none\" stroke=\"black\"/>\n",
                          kLeft, top, plot_width, kPanelHeight);
    absl::StrAppendFormat(&svg, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">epoch</text>\n",
                          kLeft + plot_width / 2, bottom + 34);
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
                          "transform=\"rotate(-90 %.2f %.2f)\">%s</text>\n",
                          kLeft - 56, top + kPanelHeight / 2, kLeft - 56, top + kPanelHeight / 2,
                          XmlEscape(PanelLabel(metric)));
    // The series.
    for (const Series& s : series) {
      if (s.points.empty()) continue;
      (s.name[0] == 't' ? any_train : any_eval) = true;
      std::string points;
      for (const auto& [e, v] : s.points)
        absl::StrAppendFormat(&points, "%s%.2f,%.2f", points.empty() ? "" : " ", X(e), Y(v));
      absl::StrAppendFormat(
          &svg,
          "<polyline class=\"series\" data-series=\"%s %s\" points=\"%s\" fill=\"none\" "
          "stroke=\"%s\" stroke-width=\"2\"%s/>\n",
          s.name, XmlEscape(metric), points, s.color,
          *s.dash ? absl::StrCat(" stroke-dasharray=\"", s.dash, "\"") : "");
      for (const auto& [e, v] : s.points) {
        absl::StrAppendFormat(&svg, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", X(e),
                              Y(v), s.color);
      }
    }
    svg += "</g>\n";
  }

  // The legend, right of the first panel.
  const double lx = kLeft + plot_width + 16;
  double ly = kTop + 12;
  svg += "<g class=\"legend\">\n";
  for (const auto& [present, name, color, dash] :
       {std::tuple{any_train, "train", kTrainColor, ""},
        std::tuple{any_eval, "eval", kEvalColor, "6,3"}}) {
    if (!present) continue;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
        "<text x=\"%.2f\" y=\"%.2f\">%s</text>\n",
        lx, ly, lx + 28, ly, color, *dash ? absl::StrCat(" stroke-dasharray=\"", dash, "\"") : "",
        lx + 34, ly + 4, name);
    ly += 20;
  }
  svg += "</g>\n</svg>\n";
  return WriteFileAtomically(path, svg);
}

absl::Status WriteRoundCounters(const std::string& path, const std::vector<KeyCounters>& counters) {
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (const KeyCounters& c : counters) {
    parts.push_back({{"server_index", c.server_index()},
                     {"key", c.key()},
                     {"version", c.version()},
                     {"pushes", c.pushes()},
                     {"taken", std::vector<uint64_t>(c.taken().begin(), c.taken().end())}});
  }
  return WriteFileAtomically(path, parts.dump(1) + "\n");
}

absl::Status WriteParams(const std::string& path, const GetParamsReply& params,
                         ParamsFormat format) {
  // Arrays need a runtime; the synchronous engine is enough for a copy into a file.
  engine::EngineOptions engine;
  engine.kind = engine::EngineOptions::Kind::kNaive;
  ASSIGN_OR_RETURN(std::unique_ptr<OwnedRuntime> rt,
                   OwnedRuntime::Create(engine, engine::StorageOptions{}, 0));
  std::map<std::string, NDArray> arrays;
  for (const auto& [prefix, tensors] :
       {std::pair{"arg:", &params.arg_params()}, std::pair{"aux:", &params.aux_params()}}) {
    for (const auto& [name, tensor] : *tensors) {
      absl::StatusOr<NDArray> array = FromTensorProto(rt->get(), tensor);
      if (!array.ok()) {
        return absl::Status(array.status().code(),
                            absl::StrCat("parameter ", name, ": ", array.status().message()));
      }
      arrays.emplace(absl::StrCat(prefix, name), *std::move(array));
    }
  }
  return SaveParamsFile(path, arrays, format);
}

}  // namespace tessera::client
