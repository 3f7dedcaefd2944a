// MNISTIter on small IDX files written here: pixel scaling, flat vs 4-D batches, shuffling
// per epoch, part_index/num_parts covering every sample once, and the errors for missing,
// mismatched, truncated and corrupt files. With TESSERA_MNIST_DIR set (e.g.
// `--test_env=TESSERA_MNIST_DIR=$PWD/.cache/mnist`), also the files ./tessera data mnist
// writes.
#include "io/mnist_iter.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/permutation.h"
#include "tests/io/io_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

constexpr int kSide = 28;
constexpr int kPixels = kSide * kSide;

uint8_t Pixel(int64_t sample, int p) { return static_cast<uint8_t>((sample * 7 + p) % 256); }
uint8_t Class(int64_t sample) { return static_cast<uint8_t>((sample * 3) % 10); }

// The IDX header, big-endian: magic, then one uint32 per dimension.
Bytes Header(uint32_t magic, const std::vector<uint32_t>& dims) {
  Bytes out;
  auto put = [&out](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out;
}

std::string WriteFile(const std::string& name, const Bytes& bytes) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

Bytes ImageFile(int n) {
  Bytes out = Header(0x803, {uint32_t(n), kSide, kSide});
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < kPixels; ++p) out.push_back(Pixel(i, p));
  }
  return out;
}

Bytes LabelFile(int n) {
  Bytes out = Header(0x801, {uint32_t(n)});
  for (int i = 0; i < n; ++i) out.push_back(Class(i));
  return out;
}

class MNISTIterTest : public ::tessera::testing::EngineTest {
 protected:
  MNISTIterOptions Files(int n, const std::string& tag = "") {
    MNISTIterOptions o;
    o.image = WriteFile(absl::StrCat("images", n, tag), ImageFile(n));
    o.label = WriteFile(absl::StrCat("labels", n, tag), LabelFile(n));
    o.silent = true;
    return o;
  }
};
TESSERA_INSTANTIATE_ENGINES(MNISTIterTest);

// Each row holds exactly the pixels / 255 and the class of the sample its index names.
void CheckSamples(const DataBatch& batch) {
  ASSERT_EQ(batch.data.size(), 1u);
  ASSERT_EQ(batch.label.size(), 1u);
  auto data = batch.data[0].AsVector<float>();
  auto label = batch.label[0].AsVector<float>();
  ASSERT_TRUE(data.ok() && label.ok());
  for (size_t r = 0; r < batch.index.size(); ++r) {
    for (int p = 0; p < kPixels; ++p) {
      ASSERT_EQ((*data)[r * kPixels + p], Pixel(batch.index[r], p) / 255.0f) << r << " " << p;
    }
    ASSERT_EQ((*label)[r], Class(batch.index[r])) << r;
  }
}

std::vector<int64_t> Order(DataIter& it) {
  std::vector<int64_t> out;
  for (const auto& b : Epoch(it, CheckSamples)) out.insert(out.end(), b.ids.begin(), b.ids.end());
  return out;
}

TEST_P(MNISTIterTest, FourDimensionalAndFlatBatches) {
  MNISTIterOptions o = Files(10);
  o.batch_size = 4;
  o.shuffle = false;
  auto it = MNISTIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_data()[0].name, "data");
  EXPECT_EQ((*it)->provide_data()[0].shape, (Shape{4, 1, 28, 28}));
  EXPECT_EQ((*it)->provide_label()[0].name, "softmax_label");
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{4}));
  auto batches = Epoch(**it, CheckSamples);  // default "discard": 2 of 2.5 batches
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(batches[1].ids, ElementsAre(4, 5, 6, 7));
  ASSERT_THAT((*it)->Reset(), IsOk());
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_EQ((*it)->Value().data[0].shape(), (Shape{4, 1, 28, 28}));

  o.flat = true;
  o.last_batch_handle = "pad";
  it = MNISTIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_data()[0].shape, (Shape{4, 784}));
  batches = Epoch(**it, CheckSamples);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_THAT(batches[2].ids, ElementsAre(8, 9, 0, 1));
  EXPECT_EQ(batches[2].pad, 2);
  ASSERT_THAT((*it)->Reset(), IsOk());
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_EQ((*it)->Value().data[0].shape(), (Shape{4, 784}));
}

TEST_P(MNISTIterTest, ShufflesEveryEpochFromTheSeed) {
  MNISTIterOptions o = Files(12);
  o.batch_size = 3;
  o.seed = 11;  // shuffle is on by default, as MXNet
  auto a = MNISTIter::Create(rt(), o);
  auto b = MNISTIter::Create(rt(), o);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = Order(**a);
    EXPECT_EQ(order, SamplePermutation(12, 11, epoch)) << epoch;
    EXPECT_EQ(order, Order(**b));
    ASSERT_THAT((*a)->Reset(), IsOk());
    ASSERT_THAT((*b)->Reset(), IsOk());
  }
}

TEST_P(MNISTIterTest, PartsCoverEverySampleExactlyOnce) {
  const int n = 23;
  MNISTIterOptions o = Files(n);
  o.batch_size = 1;
  for (bool shuffle : {false, true}) {
    for (int parts = 1; parts <= 5; ++parts) {
      std::vector<int> seen(n, 0);
      for (int k = 0; k < parts; ++k) {
        o.shuffle = shuffle;
        o.num_parts = parts;
        o.part_index = k;
        auto it = MNISTIter::Create(rt(), o);
        ASSERT_THAT(it, IsOk());
        // A contiguous slice of the file, as MXNet's GetPart.
        EXPECT_EQ((*it)->first_sample(), n * k / parts);
        EXPECT_EQ((*it)->num_samples(), n * (k + 1) / parts - n * k / parts);
        for (int64_t i : Order(**it)) {
          EXPECT_GE(i, n * k / parts);
          EXPECT_LT(i, n * (k + 1) / parts);
          ++seen[i];
        }
      }
      EXPECT_THAT(seen, ::testing::Each(1)) << parts << " parts, shuffle " << shuffle;
    }
  }
}

TEST_P(MNISTIterTest, MissingMismatchedAndWrongFiles) {
  MNISTIterOptions o = Files(5);
  MNISTIterOptions missing = o;
  missing.image = "/nonexistent/train-images-idx3-ubyte";
  EXPECT_THAT(MNISTIter::Create(rt(), missing),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/train-images")));
  MNISTIterOptions swapped = o;
  swapped.image = o.label;
  EXPECT_THAT(MNISTIter::Create(rt(), swapped),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(o.label), HasSubstr("magic number 0x00000801"))));
  MNISTIterOptions counts = o;
  counts.label = Files(6).label;
  EXPECT_THAT(MNISTIter::Create(rt(), counts),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(o.image), HasSubstr(counts.label), HasSubstr("5 images"),
                             HasSubstr("6 labels"))));
  for (auto [parts, index] : {std::pair{0, 0}, {2, 2}, {2, -1}}) {
    MNISTIterOptions bad = o;
    bad.num_parts = parts;
    bad.part_index = index;
    EXPECT_THAT(MNISTIter::Create(rt(), bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("part_index")));
  }
  MNISTIterOptions empty = o;  // 5 samples in 6 parts: part 0 is [0, 0)
  empty.num_parts = 6;
  EXPECT_THAT(MNISTIter::Create(rt(), empty),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is empty")));
  MNISTIterOptions zero = o;
  zero.batch_size = 0;
  EXPECT_THAT(MNISTIter::Create(rt(), zero),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size")));
}

TEST_P(MNISTIterTest, TruncatedAndCorruptFilesAreDataLoss) {
  const MNISTIterOptions good = Files(3);
  const Bytes images = ImageFile(3), labels = LabelFile(3);
  // Cut inside the magic, inside the dimensions, right after the header, inside the data,
  // one byte short.
  for (size_t size :
       {size_t{0}, size_t{2}, size_t{4}, size_t{10}, size_t{16}, size_t{900}, images.size() - 1}) {
    MNISTIterOptions o = good;
    o.image = WriteFile(absl::StrCat("cut", size), Bytes(images.begin(), images.begin() + size));
    EXPECT_THAT(MNISTIter::Create(rt(), o),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(o.image), HasSubstr(absl::StrCat("offset ", size)))))
        << size;
  }
  for (size_t size : {size_t{6}, size_t{8}, labels.size() - 1}) {
    MNISTIterOptions o = good;
    o.label = WriteFile(absl::StrCat("lcut", size), Bytes(labels.begin(), labels.begin() + size));
    EXPECT_THAT(MNISTIter::Create(rt(), o),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(o.label), HasSubstr(absl::StrCat("offset ", size)))))
        << size;
  }
  // Extra bytes after the data; a count of 2^32-1 images that must not be allocated.
  MNISTIterOptions o = good;
  Bytes longer = labels;
  longer.push_back(0);
  o.label = WriteFile("long", longer);
  EXPECT_THAT(
      MNISTIter::Create(rt(), o),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(o.label), HasSubstr("offset 11"))));
  o = good;
  Bytes huge = images;
  huge[4] = huge[5] = huge[6] = huge[7] = 0xff;
  o.image = WriteFile("huge", huge);
  EXPECT_THAT(MNISTIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(o.image), HasSubstr(absl::StrCat("offset ", huge.size())))));
}

TEST(MNISTIterOptionsTest, FromKwargs) {
  auto o = MNISTIterOptions::FromKwargs({{"image", "a"},
                                         {"batch_size", "64"},
                                         {"flat", "True"},
                                         {"shuffle", "0"},
                                         {"num_parts", "4"},
                                         {"part_index", "3"},
                                         {"seed", "17"}});
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->image, "a");
  EXPECT_EQ(o->label, "./train-labels-idx1-ubyte");
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_TRUE(o->flat);
  EXPECT_FALSE(o->shuffle);
  EXPECT_EQ(o->num_parts, 4);
  EXPECT_EQ(o->part_index, 3);
  EXPECT_EQ(o->seed, 17u);
  EXPECT_THAT(MNISTIterOptions::FromKwargs({{"batch", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'batch'")));
  EXPECT_THAT(MNISTIterOptions::FromKwargs({{"flat", "yes"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'flat'")));
}

// The real files, when a folder is given (never fetched here: tests stay offline).
TEST_P(MNISTIterTest, RealFilesWhenGiven) {
  const char* dir = std::getenv("TESSERA_MNIST_DIR");
  if (dir == nullptr) GTEST_SKIP() << "TESSERA_MNIST_DIR not set";
  for (auto [prefix, count] : {std::pair{"train", 8000}, {"t10k", 2000}}) {
    MNISTIterOptions o;
    o.image = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte");
    o.label = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte");
    o.batch_size = 100;
    auto it = MNISTIter::Create(rt(), o);
    ASSERT_THAT(it, IsOk());
    std::vector<int> classes(10, 0);
    double sum = 0;
    int64_t samples = 0;
    while (*(*it)->Next()) {
      auto data = (*it)->Value().data[0].AsVector<float>();
      auto label = (*it)->Value().label[0].AsVector<float>();
      for (float v : *data) sum += v;
      for (float c : *label) ++classes.at(static_cast<int>(c));
      samples += 100;
    }
    EXPECT_EQ(samples, count);
    for (int c : classes) EXPECT_GT(c, count / 20);
    const double mean = sum / (samples * 784.0);
    EXPECT_GT(mean, 0.10);  // MNIST's mean pixel is about 0.13
    EXPECT_LT(mean, 0.16);
    std::cout << prefix << ": mean pixel " << mean << ", classes";
    for (int c : classes) std::cout << " " << c;
    std::cout << "\n";
  }
}

}  // namespace
}  // namespace tessera::io
