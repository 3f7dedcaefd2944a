// CSVIter on small CSV files written here: batches equal the file contents (with and
// without a label file), the accepted formatting, exact integer dtypes, shuffling per
// epoch, pad/discard, parts covering every line once, MXNet-style kwargs, each error
// naming file and line, and skip_bad.
#include "io/csv_iter.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/permutation.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/io/io_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Value j of line i of a data file, and of a label file; exact in float32 and in "%g".
float Value(int64_t line, int64_t j) { return static_cast<float>(line * 10 + j * 0.25); }
float Label(int64_t line, int64_t j) { return static_cast<float>(line * 0.5 + j); }

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string Csv(int n, int width, float (*value)(int64_t, int64_t)) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row;
    for (int j = 0; j < width; ++j) row.push_back(value(i, j));
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

// A check for Epoch(): every row holds the line its index names, data of `width` values
// and labels of `label_width` values (all 0 when `zero_labels`).
std::function<void(const DataBatch&)> RowsAreLines(int width, int label_width,
                                                   bool zero_labels = false) {
  return [=](const DataBatch& batch) {
    ASSERT_EQ(batch.data.size(), 1u);
    ASSERT_EQ(batch.label.size(), 1u);
    auto data = batch.data[0].AsVector<float>();
    auto label = batch.label[0].AsVector<float>();
    ASSERT_TRUE(data.ok() && label.ok());
    ASSERT_EQ(data->size(), batch.index.size() * width);
    ASSERT_EQ(label->size(), batch.index.size() * label_width);
    for (size_t r = 0; r < batch.index.size(); ++r) {
      for (int j = 0; j < width; ++j) {
        ASSERT_EQ((*data)[r * width + j], Value(batch.index[r], j)) << r << " " << j;
      }
      for (int j = 0; j < label_width; ++j) {
        ASSERT_EQ((*label)[r * label_width + j], zero_labels ? 0.0f : Label(batch.index[r], j))
            << r << " " << j;
      }
    }
  };
}

std::vector<std::vector<int64_t>> Ids(const std::vector<BatchSummary>& batches) {
  std::vector<std::vector<int64_t>> out;
  for (const BatchSummary& b : batches) out.push_back(b.ids);
  return out;
}

std::vector<int64_t> Order(DataIter& it, int width, int label_width) {
  std::vector<int64_t> out;
  for (const auto& b : Epoch(it, RowsAreLines(width, label_width))) {
    out.insert(out.end(), b.ids.begin(), b.ids.end());
  }
  return out;
}

class CSVIterTest : public ::tessera::testing::EngineTest {
 protected:
  // n lines of data_shape (2,3) and, unless label_width is 0, of label_shape (label_width).
  CSVIterOptions Files(const std::string& tag, int n, int label_width = 1) {
    CSVIterOptions o;
    o.data_csv = WriteFile(absl::StrCat(tag, "_data.csv"), Csv(n, 6, Value));
    o.data_shape = Shape{2, 3};
    if (label_width > 0) {
      o.label_csv = WriteFile(absl::StrCat(tag, "_label.csv"), Csv(n, label_width, Label));
      o.label_shape = Shape{label_width};
    }
    o.silent = true;
    return o;
  }
};
TESSERA_INSTANTIATE_ENGINES(CSVIterTest);

TEST_P(CSVIterTest, BatchesHoldTheFileContents) {
  CSVIterOptions o = Files("plain", 5);
  o.batch_size = 2;
  auto it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_samples(), 5);
  ASSERT_EQ((*it)->provide_data().size(), 1u);
  EXPECT_EQ((*it)->provide_data()[0].name, "data");
  EXPECT_EQ((*it)->provide_data()[0].shape, (Shape{2, 2, 3}));
  EXPECT_EQ((*it)->provide_data()[0].dtype, DType::kFloat32);
  ASSERT_EQ((*it)->provide_label().size(), 1u);
  EXPECT_EQ((*it)->provide_label()[0].name, "softmax_label");
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{2}));  // label_shape (1): (B,), as MXNet
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto batches = Epoch(**it, RowsAreLines(6, 1));  // default "pad"
    EXPECT_THAT(Ids(batches), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4, 0)));
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[2].pad, 1);
    EXPECT_EQ((*it)->Value().data[0].shape(), (Shape{2, 2, 3}));
    EXPECT_EQ((*it)->Value().label[0].shape(), (Shape{2}));
    ASSERT_THAT((*it)->Reset(), IsOk());
  }
}

TEST_P(CSVIterTest, LabelShapesAndZeroLabelsWithoutAFile) {
  CSVIterOptions o = Files("wide", 4, 2);
  o.batch_size = 4;
  auto it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{4, 2}));
  EXPECT_EQ(Epoch(**it, RowsAreLines(6, 2)).size(), 1u);

  o = Files("nolabel", 4, 0);
  o.batch_size = 4;
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{4}));
  EXPECT_EQ(Epoch(**it, RowsAreLines(6, 1, /*zero_labels=*/true)).size(), 1u);

  o.label_shape = Shape{2, 2};
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{4, 2, 2}));
  EXPECT_EQ(Epoch(**it, RowsAreLines(6, 4, /*zero_labels=*/true)).size(), 1u);
}

TEST_P(CSVIterTest, AcceptsSpacesCrLfAndBlankLinesAtTheEnd) {
  CSVIterOptions o;
  o.data_shape = Shape{3};
  o.batch_size = 3;
  o.silent = true;
  o.data_csv = WriteFile("format.csv", " 1, 2.5 ,\t-3 \r\n4,5e1,+6\r\n7,.5,-0.125\n\r\n  \n\n");
  auto it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_samples(), 3);
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_THAT((*it)->Value().data[0].AsVector<float>(),
              ::tessera::testing::IsOkAndHolds(
                  ElementsAre(1.0f, 2.5f, -3.0f, 4.0f, 50.0f, 6.0f, 7.0f, 0.5f, -0.125f)));

  o.data_csv = WriteFile("no_final_newline.csv", "1,2,3\n4,5,6");
  o.batch_size = 1;
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_samples(), 2);
}

TEST_P(CSVIterTest, IntegerDTypesParseExactly) {
  CSVIterOptions o;
  o.data_shape = Shape{2};
  o.batch_size = 2;
  o.silent = true;
  o.dtype = DType::kInt64;
  // 2^53 + 1 has no double, let alone float, representation.
  o.data_csv = WriteFile("int64.csv", "2147483648,-5\n 9007199254740993 , 0\n");
  auto it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_data()[0].dtype, DType::kInt64);
  EXPECT_EQ((*it)->provide_label()[0].dtype, DType::kFloat32);
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_THAT((*it)->Value().data[0].AsVector<int64_t>(),
              ::tessera::testing::IsOkAndHolds(
                  ElementsAre(int64_t{2147483648}, -5, int64_t{9007199254740993}, 0)));

  o.dtype = DType::kInt32;
  o.data_csv = WriteFile("int32.csv", "200000001,-7\n2147483647,1\n");  // not floats
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_THAT((*it)->Value().data[0].AsVector<int32_t>(),
              ::tessera::testing::IsOkAndHolds(ElementsAre(200000001, -7, 2147483647, 1)));

  o.data_csv = WriteFile("int32_bad.csv", "1,2\n3,1.5\n");
  EXPECT_THAT(
      CSVIter::Create(rt(), o),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(
                   "'", o.data_csv, "' line 2, column 2: '1.5' is not an integer within int32"))));
  o.data_csv = WriteFile("int32_range.csv", "1,2147483648\n");
  EXPECT_THAT(CSVIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 1, column 2: '2147483648' is not an integer within int32")));
}

TEST_P(CSVIterTest, ShufflesEveryEpochFromTheSeed) {
  CSVIterOptions o = Files("shuffle", 12);
  o.batch_size = 3;
  o.shuffle = true;
  o.seed = 7;
  auto a = CSVIter::Create(rt(), o);
  auto b = CSVIter::Create(rt(), o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> all(12);
  std::iota(all.begin(), all.end(), int64_t{0});
  std::vector<std::vector<int64_t>> orders;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = Order(**a, 6, 1);
    EXPECT_EQ(order, SamplePermutation(12, 7, epoch)) << epoch;
    EXPECT_EQ(order, Order(**b, 6, 1)) << epoch;
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all) << epoch;
    orders.push_back(order);
    ASSERT_THAT((*a)->Reset(), IsOk());
    ASSERT_THAT((*b)->Reset(), IsOk());
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST_P(CSVIterTest, PadOrDiscardTheLastBatch) {
  const CSVIterOptions files = Files("last", 5);
  for (const char* round_batch : {"True", "False"}) {
    auto o = CSVIterOptions::FromKwargs({{"data_csv", files.data_csv},
                                         {"label_csv", files.label_csv},
                                         {"data_shape", "(2,3)"},
                                         {"batch_size", "2"},
                                         {"round_batch", round_batch},
                                         {"silent", "1"}});
    ASSERT_THAT(o, IsOk());
    auto it = CSVIter::Create(rt(), *o);
    ASSERT_THAT(it, IsOk());
    const auto batches = Epoch(**it, RowsAreLines(6, 1));
    if (std::string(round_batch) == "True") {
      EXPECT_THAT(Ids(batches),
                  ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4, 0)));
      EXPECT_EQ(batches.back().pad, 1);
    } else {
      EXPECT_THAT(Ids(batches), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
      EXPECT_EQ(batches.back().pad, 0);
    }
  }
}

TEST_P(CSVIterTest, PartsAreDisjointAndCoverEveryLine) {
  const int n = 10;
  CSVIterOptions o = Files("parts", n);
  for (bool shuffle : {false, true}) {
    for (int parts = 1; parts <= 4; ++parts) {
      std::vector<int> seen(n, 0);
      for (int k = 0; k < parts; ++k) {
        o.shuffle = shuffle;
        o.num_parts = parts;
        o.part_index = k;
        auto it = CSVIter::Create(rt(), o);
        ASSERT_THAT(it, IsOk());
        EXPECT_EQ((*it)->num_samples(), n * (k + 1) / parts - n * k / parts);
        for (int64_t i : Order(**it, 6, 1)) {  // batch_size 1: no padding rows
          EXPECT_GE(i, n * k / parts);         // a contiguous range of lines
          EXPECT_LT(i, n * (k + 1) / parts);
          ++seen[i];
        }
      }
      EXPECT_THAT(seen, ::testing::Each(1)) << parts << " parts, shuffle " << shuffle;
    }
  }
}

TEST(CSVIterOptionsTest, FromKwargs) {
  auto o = CSVIterOptions::FromKwargs({{"data_csv", "d.csv"},
                                       {"data_shape", "(2,3)"},
                                       {"label_csv", "l.csv"},
                                       {"label_shape", "(4,)"},
                                       {"batch_size", "16"},
                                       {"round_batch", "False"},
                                       {"shuffle", "True"},
                                       {"seed", "9"},
                                       {"num_parts", "3"},
                                       {"part_index", "2"},
                                       {"dtype", "int64"},
                                       {"data_name", "x"},
                                       {"label_name", "y"},
                                       {"skip_bad", "1"},
                                       {"silent", "true"}});
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->data_csv, "d.csv");
  EXPECT_EQ(o->data_shape, (Shape{2, 3}));
  EXPECT_EQ(o->label_csv, "l.csv");
  EXPECT_EQ(o->label_shape, (Shape{4}));
  EXPECT_EQ(o->batch_size, 16);
  EXPECT_EQ(o->last_batch_handle, "discard");
  EXPECT_TRUE(o->shuffle);
  EXPECT_EQ(o->seed, 9u);
  EXPECT_EQ(o->num_parts, 3);
  EXPECT_EQ(o->part_index, 2);
  EXPECT_EQ(o->dtype, DType::kInt64);
  EXPECT_EQ(o->data_name, "x");
  EXPECT_EQ(o->label_name, "y");
  EXPECT_TRUE(o->skip_bad);
  EXPECT_TRUE(o->silent);

  // MXNet's defaults and spellings: label_csv "NULL" is none, dtype "None" is float32.
  o = CSVIterOptions::FromKwargs({{"label_csv", "NULL"}, {"dtype", "None"}, {"round_batch", "1"}});
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->label_csv, "");
  EXPECT_EQ(o->label_shape, (Shape{1}));
  EXPECT_EQ(o->dtype, DType::kFloat32);
  EXPECT_EQ(o->last_batch_handle, "pad");
  EXPECT_EQ(o->batch_size, 1);
  EXPECT_FALSE(o->shuffle);
  EXPECT_FALSE(o->skip_bad);

  EXPECT_THAT(
      CSVIterOptions::FromKwargs({{"data_csv", "d.csv"}, {"batchsize", "4"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown option 'batchsize'")));
  EXPECT_THAT(CSVIterOptions::FromKwargs({{"data_shape", "(2,0)"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'data_shape'")));
  EXPECT_THAT(CSVIterOptions::FromKwargs({{"round_batch", "maybe"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'round_batch'")));
  EXPECT_THAT(CSVIterOptions::FromKwargs({{"dtype", "complex"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'dtype'")));
  EXPECT_THAT(
      CSVIterOptions::FromKwargs({{"round_batch", "True"}, {"last_batch_handle", "roll_over"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not both")));
}

TEST_P(CSVIterTest, ErrorsNameFileLineAndWhatWasExpected) {
  const CSVIterOptions good = Files("errors", 5);
  auto expect_error = [&](const CSVIterOptions& o, absl::StatusCode code,
                          const std::string& message) {
    EXPECT_THAT(CSVIter::Create(rt(), o), StatusIs(code, HasSubstr(message)));
  };
  auto with_data = [&](const std::string& name, const std::string& text) {
    CSVIterOptions o = good;
    o.data_csv = WriteFile(name, text);
    return o;
  };
  const std::string line = "1,2,3,4,5,6\n";

  CSVIterOptions o = good;
  o.data_csv = "/nonexistent/data.csv";
  expect_error(o, absl::StatusCode::kNotFound, "'/nonexistent/data.csv'");
  o = good;
  o.label_csv = "/nonexistent/label.csv";
  expect_error(o, absl::StatusCode::kNotFound, "'/nonexistent/label.csv'");

  o = with_data("few.csv", line + line + "1,2,3,4,5\n" + line + line);
  expect_error(
      o, absl::StatusCode::kInvalidArgument,
      absl::StrCat("'", o.data_csv, "' line 3: expected 6 values (data_shape (2,3)), found 5"));
  o = with_data("many.csv", line + "1,2,3,4,5,6,7\n" + line + line + line);
  expect_error(o, absl::StatusCode::kInvalidArgument,
               absl::StrCat("'", o.data_csv, "' line 2: expected 6 values"));
  o = with_data("blank.csv", line + "\n" + line + line + line);
  expect_error(
      o, absl::StatusCode::kInvalidArgument,
      absl::StrCat("'", o.data_csv, "' line 2: expected 6 values (data_shape (2,3)), found 0"));
  o = with_data("nan.csv", line + "1,2,3, abc ,5,6\n" + line + line + line);
  expect_error(o, absl::StatusCode::kInvalidArgument,
               absl::StrCat("'", o.data_csv, "' line 2, column 4: 'abc' is not a number"));
  o = with_data("huge.csv", line + line + line + "1,2,3,4,5,+1e39\n" + line);
  expect_error(o, absl::StatusCode::kInvalidArgument,
               absl::StrCat("'", o.data_csv,
                            "' line 4, column 6: '+1e39' is not a number within float32"));
  o = with_data("semicolons.csv", "1;2;3;4;5;6\n" + line + line + line + line);
  expect_error(
      o, absl::StatusCode::kInvalidArgument,
      absl::StrCat("'", o.data_csv, "' line 1: expected 6 values (data_shape (2,3)), found 1"));
  o = good;
  o.label_csv = WriteFile("bad_label.csv", "0\n1\n2\nx\n4\n");
  expect_error(o, absl::StatusCode::kInvalidArgument,
               absl::StrCat("'", o.label_csv, "' line 4, column 1: 'x' is not a number"));
  o = good;
  o.label_shape = Shape{2};
  expect_error(
      o, absl::StatusCode::kInvalidArgument,
      absl::StrCat("'", o.label_csv, "' line 1: expected 2 values (label_shape (2,)), found 1"));

  o = good;
  o.label_csv = WriteFile("six_labels.csv", Csv(6, 1, Label));
  EXPECT_THAT(CSVIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("'", good.data_csv, "' has 5 lines")),
                             HasSubstr(absl::StrCat("'", o.label_csv, "' has 6")))));

  o = good;  // 5 lines in 6 parts: part 0 is [0, 0)
  o.num_parts = 6;
  expect_error(o, absl::StatusCode::kInvalidArgument,
               absl::StrCat("part 0 of 6 of '", good.data_csv, "' (5 lines) is empty"));
  o = with_data("empty.csv", "\n");
  o.label_csv = "";
  expect_error(o, absl::StatusCode::kInvalidArgument, "(0 lines) is empty");

  for (auto [parts, index] : {std::pair{0, 0}, {2, 2}, {2, -1}}) {
    o = good;
    o.num_parts = parts;
    o.part_index = index;
    expect_error(o, absl::StatusCode::kInvalidArgument, "part_index");
  }
  o = good;
  o.batch_size = 0;
  expect_error(o, absl::StatusCode::kInvalidArgument, "batch_size must be positive, got 0");
  o = good;
  o.data_csv = "";
  expect_error(o, absl::StatusCode::kInvalidArgument, "data_csv is required");
  o = CSVIterOptions();  // default data_shape: none
  o.data_csv = good.data_csv;
  expect_error(o, absl::StatusCode::kInvalidArgument, "data_shape is required");
  o = good;
  o.data_shape = Shape{2, 0};
  expect_error(o, absl::StatusCode::kInvalidArgument, "data_shape (2,0) must have positive");
  o = good;
  o.dtype = DType::kFloat64;
  expect_error(o, absl::StatusCode::kInvalidArgument, "dtype float64");
  o = good;
  o.last_batch_handle = "wrap";
  expect_error(o, absl::StatusCode::kInvalidArgument, "last_batch_handle");
}

TEST_P(CSVIterTest, SkipBadSkipsAndCountsBadLines) {
  // 8 lines; bad: line 3 (a value), line 6 (a value too few), and line 7's label.
  std::vector<std::string> data, labels;
  for (int i = 0; i < 8; ++i) {
    std::vector<float> row;
    for (int j = 0; j < 6; ++j) row.push_back(Value(i, j));
    data.push_back(absl::StrJoin(row, ","));
    labels.push_back(absl::StrCat(Label(i, 0)));
  }
  data[2] = "1,2,abc,4,5,6";
  data[5] = "1,2,3,4,5";
  labels[6] = "?";
  CSVIterOptions o;
  o.data_csv = WriteFile("skip_data.csv", absl::StrJoin(data, "\n"));
  o.label_csv = WriteFile("skip_label.csv", absl::StrJoin(labels, "\n"));
  o.data_shape = Shape{2, 3};
  o.silent = true;
  EXPECT_THAT(CSVIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("'", o.data_csv, "' line 3, column 3"))));

  o.skip_bad = true;
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  auto it = CSVIter::Create(rt(), o);
  spdlog::set_default_logger(previous);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_samples(), 5);
  EXPECT_EQ((*it)->num_skipped(), 3);
  EXPECT_EQ(Order(**it, 6, 1), (std::vector<int64_t>{0, 1, 3, 4, 7}));
  EXPECT_THAT(log.str(),
              AllOf(HasSubstr("skipped 3 of the 8 lines of part 0/1"), HasSubstr(o.data_csv),
                    HasSubstr(o.label_csv), HasSubstr("line 3, column 3: 'abc'")));

  // Bad lines outside this part are not even parsed; a part of only bad lines is an error.
  o.num_parts = 4;
  o.part_index = 1;  // lines 3 and 4 (1-based): one bad
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_skipped(), 1);
  EXPECT_EQ(Order(**it, 6, 1), (std::vector<int64_t>{3}));
  o.part_index = 3;  // lines 7 and 8: line 7's label is bad
  it = CSVIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->num_skipped(), 1);
  EXPECT_EQ(Order(**it, 6, 1), (std::vector<int64_t>{7}));
  o.num_parts = 8;
  o.part_index = 5;  // line 6 alone
  EXPECT_THAT(CSVIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("every line of part 5 of 8 of '", o.data_csv,
                                                    "' is bad (1 of them)")),
                             HasSubstr("line 6: expected 6 values"))));
}

}  // namespace
}  // namespace tessera::io
