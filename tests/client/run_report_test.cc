// metrics.csv byte for byte, plot.svg's structure (well-formed, one polyline per series, the
// points where the values put them), and errors naming an unwritable path.
#include "client/run_report.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/status_matchers.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "ndarray/serialization.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<EpochRow> TwoEpochs() {
  return {
      {.epoch = 0,
       .train = {{"accuracy", 0.5}, {"cross-entropy", 1.25}},
       .eval = {{"accuracy", 0.75}},
       .seconds = 2.5,
       .samples_per_second = 3200},
      {.epoch = 1,
       .train = {{"accuracy", 0.875}},
       .eval = {{"accuracy", 0.9765}, {"top_k_accuracy_3", 1}},
       .seconds = 2,
       .samples_per_second = 4000.5},
  };
}

TEST(MetricsCsvTest, ExactContent) {
  const std::string path = TempDir() + "/metrics.csv";
  ASSERT_THAT(WriteMetricsCsv(path, TwoEpochs()), IsOk());
  EXPECT_EQ(Read(path),
            "epoch,seconds,samples_per_second,train_accuracy,train_cross-entropy,eval_accuracy,"
            "eval_top_k_accuracy_3\n"
            "0,2.5,3200,0.5,1.25,0.75,\n"
            "1,2,4000.5,0.875,,0.9765,1\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(MetricsCsvTest, NumbersReadBackExactly) {
  const std::string path = TempDir() + "/exact.csv";
  const double third = 1.0 / 3, tiny = 1e-300;
  ASSERT_THAT(WriteMetricsCsv(path, {{.epoch = 7, .train = {{"mse", third}}, .seconds = tiny}}),
              IsOk());
  const std::vector<std::string> lines = absl::StrSplit(Read(path), '\n');
  ASSERT_EQ(lines.size(), 3u);  // header, row, "" after the last newline
  EXPECT_EQ(lines[0], "epoch,seconds,samples_per_second,train_mse");
  const std::vector<std::string> cells = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(cells.size(), 4u);
  double v = 0;
  ASSERT_TRUE(absl::SimpleAtod(cells[3], &v));
  EXPECT_EQ(v, third);
  ASSERT_TRUE(absl::SimpleAtod(cells[1], &v));
  EXPECT_EQ(v, tiny);
}

TEST(MetricsCsvTest, NoRowsIsTheHeaderAlone) {
  const std::string path = TempDir() + "/empty.csv";
  ASSERT_THAT(WriteMetricsCsv(path, {}), IsOk());
  EXPECT_EQ(Read(path), "epoch,seconds,samples_per_second\n");
}

TEST(MetricsCsvTest, ReplacesAnOlderFile) {
  const std::string path = TempDir() + "/again.csv";
  ASSERT_THAT(WriteMetricsCsv(path, TwoEpochs()), IsOk());
  ASSERT_THAT(WriteMetricsCsv(path, {}), IsOk());
  EXPECT_EQ(Read(path), "epoch,seconds,samples_per_second\n");
}

// ---- SVG ----

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
};

// A small XML checker for what WritePlotSvg emits (elements, attributes in double quotes,
// text, entities; no comments, CDATA or processing instructions): every tag closes in
// order, attribute values and text hold no raw '<' or '&' outside entities. Returns the
// elements in document order, or an error.
absl::StatusOr<std::vector<Element>> ParseXml(const std::string& xml) {
  std::vector<Element> elements;
  std::vector<std::string> open;
  auto check_text = [](const std::string& text) -> absl::Status {
    for (size_t amp = text.find('&'); amp != std::string::npos; amp = text.find('&', amp + 1)) {
      const size_t semi = text.find(';', amp);
      const std::string entity = text.substr(amp, semi == std::string::npos ? 8 : semi - amp + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;") {
        return absl::InvalidArgumentError("bad entity " + entity);
      }
    }
    return absl::OkStatus();
  };
  size_t i = 0;
  while (i < xml.size()) {
    const size_t lt = xml.find('<', i);
    if (lt == std::string::npos) {
      if (!check_text(xml.substr(i)).ok()) return absl::InvalidArgumentError("bad trailing text");
      break;
    }
    if (absl::Status s = check_text(xml.substr(i, lt - i)); !s.ok()) return s;
    if (open.empty() && !elements.empty())
      return absl::InvalidArgumentError("content after the root element");
    // The tag's end: the first '>' outside a quoted value.
    size_t gt = lt + 1;
    bool quoted = false;
    for (; gt < xml.size() && (quoted || xml[gt] != '>'); ++gt) {
      if (xml[gt] == '"') quoted = !quoted;
      if (xml[gt] == '<') return absl::InvalidArgumentError("'<' inside a tag");
    }
    if (gt == xml.size()) return absl::InvalidArgumentError("unterminated tag");
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) {
        return absl::InvalidArgumentError("</" + tag.substr(1) + "> closes " +
                                          (open.empty() ? "nothing" : open.back()));
      }
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.ends_with("/");
    if (self_closing) tag.pop_back();
    Element e;
    size_t p = tag.find_first_of(" \n");
    e.name = tag.substr(0, p);
    if (e.name.empty()) return absl::InvalidArgumentError("empty tag name");
    while (p != std::string::npos && p < tag.size()) {
      p = tag.find_first_not_of(" \n", p);
      if (p == std::string::npos) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') {
        return absl::InvalidArgumentError("bad attribute in <" + e.name + ">");
      }
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return absl::InvalidArgumentError("unterminated attribute");
      const std::string value = tag.substr(eq + 2, close - eq - 2);
      if (absl::Status s = check_text(value); !s.ok()) return s;
      if (!e.attributes.emplace(tag.substr(p, eq - p), value).second) {
        return absl::InvalidArgumentError("duplicate attribute in <" + e.name + ">");
      }
      p = close + 1;
    }
    elements.push_back(e);
    if (!self_closing) open.push_back(e.name);
  }
  if (!open.empty()) return absl::InvalidArgumentError("<" + open.back() + "> never closes");
  if (elements.empty()) return absl::InvalidArgumentError("no elements");
  return elements;
}

TEST(XmlCheckerTest, CatchesMalformedDocuments) {
  EXPECT_THAT(ParseXml("<svg><g></svg>").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseXml("<svg><g/>").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseXml("<svg>a & b</svg>").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseXml("<svg x=\"1\" x=\"2\"/>").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseXml("<svg/><svg/>").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseXml("<svg a=\"&lt;\"><g/>x &amp; y</svg>").status(), IsOk());
}

std::vector<Element> Polylines(const std::vector<Element>& elements) {
  std::vector<Element> out;
  for (const Element& e : elements) {
    if (e.name == "polyline") out.push_back(e);
  }
  return out;
}

std::vector<std::pair<double, double>> Points(const Element& polyline) {
  std::vector<std::pair<double, double>> out;
  for (absl::string_view point : absl::StrSplit(polyline.attributes.at("points"), ' ')) {
    std::vector<std::string> xy = absl::StrSplit(point, ',');
    double x = 0, y = 0;
    EXPECT_EQ(xy.size(), 2u);
    EXPECT_TRUE(absl::SimpleAtod(xy[0], &x) && absl::SimpleAtod(xy[1], &y)) << point;
    out.emplace_back(x, y);
  }
  return out;
}

TEST(PlotSvgTest, OnePolylinePerSeries) {
  const std::string path = TempDir() + "/plot.svg";
  std::vector<EpochRow> rows;
  for (int e = 0; e < 5; ++e) {
    rows.push_back({.epoch = e,
                    .train = {{"accuracy", 0.8 + 0.03 * e}, {"cross-entropy", 0.6 - 0.1 * e}},
                    .eval = {{"accuracy", 0.85 + 0.02 * e}, {"cross-entropy", 0.5 - 0.08 * e}},
                    .seconds = 10,
                    .samples_per_second = 800});
  }
  ASSERT_THAT(WritePlotSvg(path, rows, "lenet <mnist> & co"), IsOk());
  const std::string svg = Read(path);
  EXPECT_THAT(svg, StartsWith("<svg"));
  absl::StatusOr<std::vector<Element>> elements = ParseXml(svg);
  ASSERT_THAT(elements.status(), IsOk()) << svg;
  EXPECT_EQ(elements->front().name, "svg");
  EXPECT_EQ(elements->front().attributes.at("xmlns"), "http://www.w3.org/2000/svg");

  const std::vector<Element> lines = Polylines(*elements);
  ASSERT_EQ(lines.size(), 4u);
  // Loss first, then accuracy; train then eval.
  EXPECT_EQ(lines[0].attributes.at("data-series"), "train cross-entropy");
  EXPECT_EQ(lines[1].attributes.at("data-series"), "eval cross-entropy");
  EXPECT_EQ(lines[2].attributes.at("data-series"), "train accuracy");
  EXPECT_EQ(lines[3].attributes.at("data-series"), "eval accuracy");
  for (const Element& line : lines) {
    const auto points = Points(line);
    ASSERT_EQ(points.size(), 5u);
    for (size_t i = 1; i < points.size(); ++i)
      EXPECT_GT(points[i].first, points[i - 1].first);  // epochs rightwards
  }
  // SVG's y grows downwards: falling loss goes down the page, rising accuracy up.
  const auto loss = Points(lines[0]), accuracy = Points(lines[2]);
  EXPECT_GT(loss.back().second, loss.front().second);
  EXPECT_LT(accuracy.back().second, accuracy.front().second);
  // The loss panel sits above the accuracy panel.
  EXPECT_LT(loss.front().second, accuracy.back().second);
  // Equal steps in value are equal steps on the page.
  EXPECT_NEAR(accuracy[1].second - accuracy[0].second, accuracy[4].second - accuracy[3].second,
              0.02);

  EXPECT_THAT(svg, HasSubstr("lenet &lt;mnist&gt; &amp; co"));
  EXPECT_THAT(svg, HasSubstr(">epoch</text>"));
  EXPECT_THAT(svg, HasSubstr(">cross-entropy (loss)</text>"));
  EXPECT_THAT(svg, HasSubstr(">accuracy</text>"));
  EXPECT_THAT(svg, HasSubstr(">train</text>"));  // the legend
  EXPECT_THAT(svg, HasSubstr(">eval</text>"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(PlotSvgTest, OnlyTheSeriesPresent) {
  const std::string path = TempDir() + "/train_only.svg";
  ASSERT_THAT(WritePlotSvg(path,
                           {{.epoch = 0, .train = {{"accuracy", 0.5}}},
                            {.epoch = 1, .train = {{"accuracy", NAN}}},
                            {.epoch = 2, .train = {{"accuracy", 0.7}}}},
                           "t"),
              IsOk());
  const std::string svg = Read(path);
  absl::StatusOr<std::vector<Element>> elements = ParseXml(svg);
  ASSERT_THAT(elements.status(), IsOk()) << svg;
  const std::vector<Element> lines = Polylines(*elements);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(Points(lines[0]).size(), 2u);  // the NaN is left out
  EXPECT_THAT(svg, Not(HasSubstr(">eval</text>")));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
}

TEST(PlotSvgTest, OneEpochStillShowsAPoint) {
  const std::string path = TempDir() + "/one.svg";
  ASSERT_THAT(
      WritePlotSvg(path, {{.epoch = 0, .train = {{"accuracy", 0.9}}, .eval = {{"accuracy", 0.9}}}},
                   "one"),
      IsOk());
  const std::string svg = Read(path);
  absl::StatusOr<std::vector<Element>> elements = ParseXml(svg);
  ASSERT_THAT(elements.status(), IsOk());
  EXPECT_EQ(Polylines(*elements).size(), 2u);
  EXPECT_THAT(svg, HasSubstr(">0</text>"));  // the epoch's tick, and no others
  EXPECT_THAT(svg, Not(HasSubstr(">-1</text>")));
  EXPECT_THAT(svg, Not(HasSubstr(">1</text>")));
  int circles = 0;
  for (const Element& e : *elements) circles += e.name == "circle";
  EXPECT_EQ(circles, 2);
}

TEST(PlotSvgTest, NoRowsIsAValidEmptyPlot) {
  const std::string path = TempDir() + "/none.svg";
  ASSERT_THAT(WritePlotSvg(path, {}, "empty"), IsOk());
  const std::string svg = Read(path);
  absl::StatusOr<std::vector<Element>> elements = ParseXml(svg);
  ASSERT_THAT(elements.status(), IsOk()) << svg;
  EXPECT_TRUE(Polylines(*elements).empty());
  EXPECT_THAT(svg, HasSubstr("no epochs yet"));
}

TEST(RunReportTest, UnwritablePathIsAnErrorNamingIt) {
  const std::string path = TempDir() + "/no/such/folder/metrics.csv";
  EXPECT_THAT(WriteMetricsCsv(path, TwoEpochs()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_THAT(
      WritePlotSvg(TempDir() + "/no/such/folder/plot.svg", TwoEpochs(), "t"),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr(TempDir() + "/no/such/folder/plot.svg")));
  // A folder where the file should be.
  const std::string folder = TempDir() + "/a-folder";
  fs::create_directories(folder);
  const absl::Status over_folder = WriteMetricsCsv(folder, TwoEpochs());
  EXPECT_FALSE(over_folder.ok());
  EXPECT_THAT(std::string(over_folder.message()), HasSubstr(folder));
  EXPECT_FALSE(fs::exists(folder + ".tmp"));
  EXPECT_TRUE(fs::is_directory(folder));
}

TEST(RoundCountersTest, OneObjectPerKeyPartInOrder) {
  std::vector<KeyCounters> counters(2);
  counters[0].set_server_index(0);
  counters[0].set_key(3);
  counters[0].set_version(12);
  counters[0].set_pushes(24);
  counters[0].add_taken(12);
  counters[0].add_taken(12);
  counters[1].set_server_index(1);
  counters[1].set_key(3);
  const std::string path = TempDir() + "/round_counters.json";
  ASSERT_THAT(WriteRoundCounters(path, counters), IsOk());
  EXPECT_EQ(Read(path),
            "[\n {\n  \"server_index\": 0,\n  \"key\": 3,\n  \"version\": 12,\n  \"pushes\": 24,\n"
            "  \"taken\": [\n   12,\n   12\n  ]\n },\n {\n  \"server_index\": 1,\n  \"key\": 3,\n"
            "  \"version\": 0,\n  \"pushes\": 0,\n  \"taken\": []\n }\n]\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(WriteParamsTest, WritesMXNetKeysThatLoadBack) {
  auto rt = OwnedRuntime::Create(0);
  ASSERT_THAT(rt, IsOk());
  GetParamsReply params;
  auto weight = FromVector<float>((*rt)->get(), Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  auto mean = FromVector<float>((*rt)->get(), Shape{3}, {0.5f, 0.25f, 0.125f});
  ASSERT_THAT(weight, IsOk());
  ASSERT_THAT(mean, IsOk());
  ASSERT_THAT(ToTensorProto(*weight, &(*params.mutable_arg_params())["fc1_weight"]), IsOk());
  ASSERT_THAT(ToTensorProto(*mean, &(*params.mutable_aux_params())["bn_moving_mean"]), IsOk());
  const std::string path = ::testing::TempDir() + "/final.params";
  ASSERT_THAT(WriteParams(path, params), IsOk());

  auto loaded = LoadArrayMap((*rt)->get(), path);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->at("arg:fc1_weight").shape(), (Shape{2, 3}));
  const auto values = [&](const std::string& key) {
    absl::StatusOr<std::vector<float>> v = loaded->at(key).AsVector<float>();
    EXPECT_THAT(v, IsOk());
    return v.value_or(std::vector<float>());
  };
  EXPECT_EQ(values("arg:fc1_weight"), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(values("aux:bn_moving_mean"), (std::vector<float>{0.5f, 0.25f, 0.125f}));

  (*params.mutable_arg_params())["broken"].add_shape(-1);
  EXPECT_THAT(WriteParams(path, params),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter broken")));
  const absl::Status unwritable = WriteParams("/nonexistent-dir/x.params", GetParamsReply());
  EXPECT_FALSE(unwritable.ok());
  EXPECT_THAT(unwritable.message(), HasSubstr("/nonexistent-dir/x.params"));
}

}  // namespace
}  // namespace tessera::client
