// Helpers shared by the data-iterator tests: small source arrays whose rows say which
// sample they are, and a loop collecting one epoch of batches.
#ifndef TESSERA_TESTS_IO_IO_TEST_UTIL_H_
#define TESSERA_TESTS_IO_IO_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "core/check.h"
#include "gtest/gtest.h"
#include "io/data_iter.h"
#include "ndarray/ndarray.h"

namespace tessera::io {

// (n, width) float32: row i is (i*10, i*10 + 1, ...).
inline NDArray MakeRows(const Runtime& rt, int n, int width) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < width; ++j) v.push_back(static_cast<float>(i * 10 + j));
  }
  auto a = FromVector<float>(rt, Shape{n, width}, v);
  TESSERA_CHECK(a.ok());
  return *a;
}

// (n,) int32: i.
inline NDArray MakeLabels(const Runtime& rt, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  auto a = FromVector<int32_t>(rt, Shape{n}, v);
  TESSERA_CHECK(a.ok());
  return *a;
}

struct BatchSummary {
  std::vector<int64_t> ids;  // DataBatch::index
  int pad = 0;
};

// Checks, for batches of MakeRows/MakeLabels sources, that each row is the sample its
// index names.
inline void CheckRowsMatchIndex(const DataBatch& batch) {
  ASSERT_EQ(batch.data.size(), 1u);
  const int64_t rows = batch.data[0].shape()[0], width = batch.data[0].shape()[1];
  ASSERT_EQ(static_cast<int64_t>(batch.index.size()), rows);
  auto data = batch.data[0].AsVector<float>();
  ASSERT_TRUE(data.ok()) << data.status();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j) {
      ASSERT_EQ((*data)[r * width + j], static_cast<float>(batch.index[r] * 10 + j)) << r;
    }
  }
  if (batch.label.empty()) return;
  auto label = batch.label[0].AsVector<int32_t>();
  ASSERT_TRUE(label.ok()) << label.status();
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ((*label)[r], batch.index[r]) << r;
}

// Next() until false, running `check` on every batch (default: CheckRowsMatchIndex).
inline std::vector<BatchSummary> Epoch(
    DataIter& it, const std::function<void(const DataBatch&)>& check = CheckRowsMatchIndex) {
  std::vector<BatchSummary> out;
  for (;;) {
    auto more = it.Next();
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) return out;
    EXPECT_EQ(static_cast<int>(it.Value().index.size()), it.batch_size());
    if (check) check(it.Value());
    out.push_back({it.Value().index, it.Value().pad});
  }
}

}  // namespace tessera::io

#endif  // TESSERA_TESTS_IO_IO_TEST_UTIL_H_
