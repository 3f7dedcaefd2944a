// ImageRecordIter on real .rec files written by the test: pixels, labels and ids of every
// batch against the images packed (PNG, so decoding is exact), crops, mirror, resize and
// normalization, last-batch handling, partitions with and without an index, determinism of
// the random augmentation across thread counts and prefetching, and bad records.
#include "io/image_record_iter.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/image_augment.h"
#include "io/image_codec.h"
#include "io/image_record.h"
#include "io/recordio.h"
#include "tests/ndarray/test_util.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::IsOkAndHolds;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

// Pixel (y, x, c) of test image `id`: distinct per image, position and channel.
uint8_t PixelOf(int id, int y, int x, int c) { return (id * 37 + y * 11 + x * 3 + c * 71) % 256; }

Image MakeImage(int id, int height, int width, int channels = 3) {
  Image image{height, width, channels,
              std::vector<uint8_t>(static_cast<size_t>(height) * width * channels)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) image.at(y, x, c) = PixelOf(id, y, x, c);
    }
  }
  return image;
}

struct RecFile {
  std::string rec, idx;
};

// Writes `count` PNG records of height x width images, id i, label i % 5 (label_width 1)
// or {i, -i} (2), and their index. `corrupt`: ids whose image bytes are garbage.
RecFile WriteRec(const std::string& name, int count, int height, int width, int label_width = 1,
                 const std::set<int>& corrupt = {}) {
  const std::string dir = ::testing::TempDir() + "/image_record_iter_test";
  std::filesystem::create_directories(dir);
  RecFile file{dir + "/" + name + ".rec", dir + "/" + name + ".idx"};
  auto writer = RecordIOWriter::Open(file.rec);
  TESSERA_CHECK(writer.ok());
  std::vector<RecordIndexEntry> index;
  for (int i = 0; i < count; ++i) {
    std::string png = "not an image at all";
    if (!corrupt.contains(i)) {
      auto encoded = EncodePng(MakeImage(i, height, width));
      TESSERA_CHECK(encoded.ok());
      png = *encoded;
    }
    const std::vector<float> labels =
        label_width == 1 ? std::vector<float>{static_cast<float>(i % 5)}
                         : std::vector<float>{static_cast<float>(i), -static_cast<float>(i)};
    auto offset = (*writer)->Write(PackImageRecord(labels, i, 0, png));
    TESSERA_CHECK(offset.ok());
    index.push_back({static_cast<uint64_t>(i), *offset});
  }
  TESSERA_CHECK((*writer)->Close().ok());
  TESSERA_CHECK(WriteRecordIndex(file.idx, index).ok());
  return file;
}

ImageRecordIterOptions Options(const RecFile& file, int batch, Shape data_shape) {
  ImageRecordIterOptions o;
  o.path_imgrec = file.rec;
  o.path_imgidx = file.idx;
  o.data_shape = std::move(data_shape);
  o.batch_size = batch;
  o.preprocess_threads = 2;
  o.silent = true;
  return o;
}

struct Batch {
  std::vector<float> data, label;
  std::vector<int64_t> index;
  int pad = 0;
};

std::vector<Batch> ReadEpoch(DataIter& it) {
  std::vector<Batch> out;
  for (;;) {
    auto more = it.Next();
    EXPECT_THAT(more, IsOk());
    if (!more.ok() || !*more) return out;
    const DataBatch& b = it.Value();
    auto data = b.data[0].AsVector<float>();
    auto label = b.label[0].AsVector<float>();
    EXPECT_THAT(data, IsOk());
    EXPECT_THAT(label, IsOk());
    out.push_back({*data, *label, b.index, b.pad});
  }
}

std::vector<int64_t> Ids(const std::vector<Batch>& epoch, bool with_pad = true) {
  std::vector<int64_t> ids;
  for (const Batch& b : epoch) {
    const size_t keep = b.index.size() - (with_pad ? 0 : b.pad);
    ids.insert(ids.end(), b.index.begin(), b.index.begin() + keep);
  }
  return ids;
}

class ImageRecordIterTest : public ::tessera::testing::EngineTest {};
TESSERA_INSTANTIATE_ENGINES(ImageRecordIterTest);

TEST_P(ImageRecordIterTest, BatchesHoldCentreCropsNormalizedWithTheirLabels) {
  const RecFile file = WriteRec("plain", 10, 10, 12);
  ImageRecordIterOptions o = Options(file, 4, Shape{3, 6, 8});
  o.mean = {10, 20, 30};
  o.std = {2, 4, 8};
  o.scale = 0.5f;
  auto it = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_data()[0].shape, (Shape{4, 3, 6, 8}));
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{4}));
  EXPECT_EQ((*it)->num_batches(), 3);
  const std::vector<Batch> epoch = ReadEpoch(**it);
  ASSERT_EQ(epoch.size(), 3u);
  EXPECT_EQ(Ids(epoch), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
  EXPECT_EQ(epoch[2].pad, 2);
  for (const Batch& b : epoch) {
    for (int row = 0; row < 4; ++row) {
      const int id = static_cast<int>(b.index[row]);
      EXPECT_EQ(b.label[row], id % 5);
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < 6; ++y) {
          for (int x = 0; x < 8; ++x) {
            // Centre crop of 10x12: rows 2..7, columns 2..9.
            const float want = (PixelOf(id, y + 2, x + 2, c) - o.mean[c]) * 0.5f / o.std[c];
            ASSERT_FLOAT_EQ(b.data[((row * 3 + c) * 6 + y) * 8 + x], want)
                << "id " << id << " c " << c << " y " << y << " x " << x;
          }
        }
      }
    }
  }
  // The next epoch is the same (no shuffle); "discard" drops the short batch.
  ASSERT_THAT((*it)->Reset(), IsOk());
  EXPECT_EQ(Ids(ReadEpoch(**it)), Ids(epoch));
  o.last_batch_handle = "discard";
  auto discard = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(discard, IsOk());
  EXPECT_EQ((*discard)->num_batches(), 2);
  EXPECT_EQ(Ids(ReadEpoch(**discard)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_P(ImageRecordIterTest, GrayResizedAndMultiLabel) {
  const RecFile file = WriteRec("multilabel", 3, 20, 30, /*label_width=*/2);
  ImageRecordIterOptions o = Options(file, 3, Shape{1, 10, 10});
  o.label_width = 2;
  o.resize = 10;  // 20x30 -> 10x15, then the centre 10x10
  auto it = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  EXPECT_EQ((*it)->provide_label()[0].shape, (Shape{3, 2}));
  const std::vector<Batch> epoch = ReadEpoch(**it);
  ASSERT_EQ(epoch.size(), 1u);
  EXPECT_EQ(epoch[0].label, (std::vector<float>{0, 0, 1, -1, 2, -2}));
  ASSERT_EQ(epoch[0].data.size(), 3u * 10 * 10);
  // Against decoding the same image to gray and resizing it here.
  for (int row = 0; row < 3; ++row) {
    auto png = EncodePng(MakeImage(row, 20, 30));
    ASSERT_THAT(png, IsOk());
    auto gray = DecodeImage(*png, 1);
    ASSERT_THAT(gray, IsOk());
    const Image small = ResizeShorter(*gray, 10);
    ASSERT_EQ(small.width, 15);
    for (int y = 0; y < 10; ++y) {
      for (int x = 0; x < 10; ++x) {
        ASSERT_EQ(epoch[0].data[(row * 10 + y) * 10 + x], small.at(y, x + 2, 0)) << row;
      }
    }
  }
}

TEST_P(ImageRecordIterTest, ShuffleAndAugmentationAreDeterministicAcrossThreadsAndPrefetch) {
  const RecFile file = WriteRec("shuffle", 23, 12, 12);
  ImageRecordIterOptions o = Options(file, 5, Shape{3, 8, 8});
  o.shuffle = true;
  o.rand_crop = true;
  o.rand_mirror = true;
  o.seed = 7;
  std::vector<std::vector<Batch>> reference;
  for (auto [threads, prefetch] : {std::pair{1, 0}, std::pair{3, 0}, std::pair{2, 3}}) {
    o.preprocess_threads = threads;
    o.prefetch_buffer = prefetch;
    auto it = ImageRecordIter::Create(rt(), o);
    ASSERT_THAT(it, IsOk());
    for (int epoch = 0; epoch < 2; ++epoch) {
      if (epoch > 0) {
        ASSERT_THAT((*it)->Reset(), IsOk());
      }
      std::vector<Batch> got = ReadEpoch(**it);
      std::vector<int64_t> ids = Ids(got, /*with_pad=*/false);
      std::sort(ids.begin(), ids.end());
      ASSERT_EQ(ids.size(), 23u);
      for (int i = 0; i < 23; ++i) EXPECT_EQ(ids[i], i);  // a permutation of every record
      if (reference.size() < 2) {
        reference.push_back(std::move(got));
        continue;
      }
      ASSERT_EQ(got.size(), reference[epoch].size());
      for (size_t b = 0; b < got.size(); ++b) {
        EXPECT_EQ(got[b].index, reference[epoch][b].index) << threads << " threads";
        EXPECT_EQ(got[b].data, reference[epoch][b].data) << threads << " threads";
      }
    }
  }
  EXPECT_NE(Ids(reference[0]), Ids(reference[1]));  // each epoch has its own order
  std::vector<int64_t> in_order(23);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(Ids(reference[0], false), in_order);

  // The crops and mirrors are random but each row is some 8x8 window of its image, some
  // mirrored and some not.
  int mirrored = 0, plain = 0;
  for (const Batch& b : reference[0]) {
    for (size_t row = 0; row < b.index.size(); ++row) {
      const int id = static_cast<int>(b.index[row]);
      bool found = false;
      for (int y0 = 0; y0 <= 4 && !found; ++y0) {
        for (int x0 = 0; x0 <= 4 && !found; ++x0) {
          for (bool mirror : {false, true}) {
            bool same = true;
            for (int c = 0; c < 3 && same; ++c) {
              for (int y = 0; y < 8 && same; ++y) {
                for (int x = 0; x < 8 && same; ++x) {
                  const int sx = x0 + (mirror ? 7 - x : x);
                  same = b.data[((row * 3 + c) * 8 + y) * 8 + x] == PixelOf(id, y0 + y, sx, c);
                }
              }
            }
            if (same) {
              found = true;
              (mirror ? mirrored : plain)++;
              break;
            }
          }
        }
      }
      EXPECT_TRUE(found) << "row " << row << " (record " << id << ") is no window of it";
    }
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_GT(plain, 0);
}

TEST_P(ImageRecordIterTest, PartsAreDisjointAndCoverEveryRecordWithAndWithoutIndex) {
  const RecFile file = WriteRec("parts", 17, 6, 6);
  for (bool with_index : {true, false}) {
    for (int parts = 1; parts <= 4; ++parts) {
      std::vector<int64_t> all;
      for (int k = 0; k < parts; ++k) {
        ImageRecordIterOptions o = Options(file, 2, Shape{3, 6, 6});
        if (!with_index) o.path_imgidx.clear();
        o.num_parts = parts;
        o.part_index = k;
        o.shuffle = true;
        auto it = ImageRecordIter::Create(rt(), o);
        ASSERT_THAT(it, IsOk());
        const std::vector<int64_t> ids = Ids(ReadEpoch(**it), /*with_pad=*/false);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      std::sort(all.begin(), all.end());
      ASSERT_EQ(all.size(), 17u) << parts << " parts, index " << with_index;
      for (int i = 0; i < 17; ++i) EXPECT_EQ(all[i], i);
    }
  }
}

TEST_P(ImageRecordIterTest, ABadRecordIsAnErrorNamingItsOffsetOrSkippedAndCounted) {
  const RecFile file = WriteRec("bad", 9, 6, 6, 1, /*corrupt=*/{4});
  auto index = ReadRecordIndex(file.idx);
  ASSERT_THAT(index, IsOk());
  ImageRecordIterOptions o = Options(file, 3, Shape{3, 6, 6});
  auto it = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  ASSERT_THAT((*it)->Next(), IsOkAndHolds(true));
  EXPECT_THAT((*it)->Next(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(absl::StrCat("bad.rec' record at byte offset ",
                                              (*index)[4].offset))));

  o.skip_bad = true;
  for (int epoch = 0; epoch < 2; ++epoch) {  // the second epoch skips it without decoding
    auto skipping = ImageRecordIter::Create(rt(), o);
    ASSERT_THAT(skipping, IsOk());
    const std::vector<Batch> got = ReadEpoch(**skipping);
    EXPECT_EQ(Ids(got), (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8, 0}));
    EXPECT_EQ(got.back().pad, 1);
  }

  o.skip_bad = false;
  o.label_width = 2;  // the records hold one label
  auto wrong_width = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(wrong_width, IsOk());
  EXPECT_THAT((*wrong_width)->Next(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("label_width is 2")));
}

TEST_P(ImageRecordIterTest, TruncatedFilesAndBadOptionsAreErrors) {
  const RecFile file = WriteRec("truncated", 4, 6, 6);
  const auto size = std::filesystem::file_size(file.rec);
  std::filesystem::resize_file(file.rec, size - 10);
  ImageRecordIterOptions o = Options(file, 2, Shape{3, 6, 6});
  o.path_imgidx.clear();
  EXPECT_THAT(ImageRecordIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated.rec")));
  o.path_imgidx = file.idx;  // with the index, the last record fails when read
  o.last_batch_handle = "discard";
  auto it = ImageRecordIter::Create(rt(), o);
  ASSERT_THAT(it, IsOk());
  ASSERT_THAT((*it)->Next(), IsOkAndHolds(true));
  EXPECT_THAT((*it)->Next(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated.rec")));

  o.path_imgrec = file.rec + ".missing";
  EXPECT_THAT(ImageRecordIter::Create(rt(), o), StatusIs(absl::StatusCode::kNotFound));
  o = Options(file, 2, Shape{6, 6});
  EXPECT_THAT(ImageRecordIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_shape")));
  o = Options(file, 2, Shape{3, 6, 6});
  o.last_batch_handle = "roll_over";
  EXPECT_THAT(ImageRecordIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("roll_over")));
  o = Options(file, 2, Shape{3, 6, 6});
  o.part_index = 3;
  o.num_parts = 2;
  EXPECT_THAT(ImageRecordIter::Create(rt(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("part_index 3")));
}

TEST(ImageRecordIterOptionsTest, FromKwargsReadsMXNetNames) {
  auto o = ImageRecordIterOptions::FromKwargs({{"path_imgrec", "a.rec"},
                                               {"data_shape", "(3,224,224)"},
                                               {"batch_size", "128"},
                                               {"rand_crop", "True"},
                                               {"rand_mirror", "1"},
                                               {"mean_g", "116.28"},
                                               {"std_b", "57.375"},
                                               {"round_batch", "False"},
                                               {"preprocess_threads", "2"}});
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->data_shape, (Shape{3, 224, 224}));
  EXPECT_EQ(o->batch_size, 128);
  EXPECT_TRUE(o->rand_crop && o->rand_mirror);
  EXPECT_FLOAT_EQ(o->mean[1], 116.28f);
  EXPECT_FLOAT_EQ(o->std[2], 57.375f);
  EXPECT_EQ(o->last_batch_handle, "discard");
  EXPECT_EQ(o->preprocess_threads, 2);
  EXPECT_THAT(ImageRecordIterOptions::FromKwargs({{"crop", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'crop'")));
  EXPECT_THAT(ImageRecordIterOptions::FromKwargs({{"data_shape", "(3,x)"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_shape")));
}

}  // namespace
}  // namespace tessera::io
