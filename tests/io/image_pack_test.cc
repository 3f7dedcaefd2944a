// PackImages on small JPEG and PNG files written here: a folder of class sub-folders and an
// im2rec image list, read back through the .idx, RecordIOReader and UnpackImageRecord;
// resizing; undecodable files with and without skip_bad; missing and malformed sources.
#include "io/image_pack.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
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

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Image MakeImage(int height, int width, int channels, int seed) {
  Image image{height, width, channels, {}};
  image.pixels.resize(static_cast<size_t>(height) * width * channels);
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    image.pixels[i] = static_cast<uint8_t>((i * 37 + seed * 101) % 256);
  }
  return image;
}

std::string FileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Png(const Image& image) {
  auto bytes = EncodePng(image);
  EXPECT_THAT(bytes, IsOk());
  return bytes.ok() ? *bytes : "";
}

std::string Jpeg(const Image& image) {
  auto bytes = EncodeJpeg(image, 90);
  EXPECT_THAT(bytes, IsOk());
  return bytes.ok() ? *bytes : "";
}

// One record read back through the index.
struct Packed {
  uint64_t key = 0;
  std::vector<float> labels;
  uint64_t id = 0, id2 = 0;
  std::string image;
};

std::vector<Packed> ReadPacked(const std::string& prefix) {
  std::vector<Packed> out;
  auto index = ReadRecordIndex(prefix + ".idx");
  EXPECT_THAT(index, IsOk());
  auto reader = RecordIOReader::Open(prefix + ".rec");
  EXPECT_THAT(reader, IsOk());
  if (!index.ok() || !reader.ok()) return out;
  for (const RecordIndexEntry& entry : *index) {
    auto record = (*reader)->ReadAt(entry.offset);
    EXPECT_THAT(record, IsOk());
    if (!record.ok()) return out;
    auto unpacked = UnpackImageRecord(*record);
    EXPECT_THAT(unpacked, IsOk());
    if (!unpacked.ok()) return out;
    out.push_back(
        {entry.key, unpacked->labels, unpacked->id, unpacked->id2, std::string(unpacked->image)});
  }
  // The index covers the file: sequential reading finds as many records.
  std::string record;
  size_t count = 0;
  for (auto start = (*reader)->Next(&record); start.ok() && start->has_value();
       start = (*reader)->Next(&record)) {
    ++count;
  }
  EXPECT_EQ(count, index->size());
  return out;
}

class ImagePackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("image_pack_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  fs::path dir_;
};

TEST_F(ImagePackTest, PacksFolderOfClasses) {
  const fs::path src = dir_ / "images";
  const Image gray = MakeImage(5, 7, 1, 1), rgb = MakeImage(6, 8, 3, 2);
  WriteBytes(src / "a_cats" / "x.png", Png(gray));
  WriteBytes(src / "a_cats" / "y.jpg", Jpeg(MakeImage(9, 4, 3, 3)));
  WriteBytes(src / "a_cats" / "notes.txt", "not an image");
  WriteBytes(src / "b_dogs" / "a.png", Png(rgb));
  WriteBytes(src / "b_dogs" / "b.JPG", Jpeg(MakeImage(10, 12, 3, 4)));
  WriteBytes(src / "b_dogs" / "c.jpeg", Jpeg(MakeImage(3, 3, 1, 5)));
  fs::create_directories(src / "c_empty");

  PackOptions options;
  options.source = src.string();
  options.output = (dir_ / "out").string();
  auto summary = PackImages(options);
  ASSERT_THAT(summary, IsOk());
  EXPECT_EQ(summary->records, 5);
  EXPECT_EQ(summary->skipped_bad, 0);
  EXPECT_EQ(summary->skipped_other, 1);
  EXPECT_THAT(summary->classes, ElementsAre("a_cats", "b_dogs", "c_empty"));
  EXPECT_EQ(summary->bytes, fs::file_size(dir_ / "out.rec"));

  const std::vector<fs::path> files = {src / "a_cats" / "x.png", src / "a_cats" / "y.jpg",
                                       src / "b_dogs" / "a.png", src / "b_dogs" / "b.JPG",
                                       src / "b_dogs" / "c.jpeg"};
  const std::vector<float> labels = {0, 0, 1, 1, 1};
  const std::vector<std::vector<int>> shapes = {
      {5, 7, 1}, {9, 4, 3}, {6, 8, 3}, {10, 12, 3}, {3, 3, 1}};
  const std::vector<Packed> packed = ReadPacked(options.output);
  ASSERT_EQ(packed.size(), files.size());
  for (size_t i = 0; i < packed.size(); ++i) {
    SCOPED_TRACE(files[i].string());
    EXPECT_EQ(packed[i].key, i);
    EXPECT_EQ(packed[i].id, i);
    EXPECT_EQ(packed[i].id2, 0);
    EXPECT_THAT(packed[i].labels, ElementsAre(labels[i]));
    EXPECT_EQ(packed[i].image, FileBytes(files[i]));  // stored as they are without resize
    auto decoded = DecodeImage(packed[i].image, 0);
    ASSERT_THAT(decoded, IsOk());
    EXPECT_THAT((std::vector<int>{decoded->height, decoded->width, decoded->channels}),
                ::testing::ElementsAreArray(shapes[i]));
  }
  // PNG is lossless: exactly the pixels written.
  EXPECT_EQ(DecodeImage(packed[0].image, 0)->pixels, gray.pixels);
  EXPECT_EQ(DecodeImage(packed[2].image, 0)->pixels, rgb.pixels);

  EXPECT_EQ(FileBytes(dir_ / "out.lst"),
            "0\t0.000000\ta_cats/x.png\n"
            "1\t0.000000\ta_cats/y.jpg\n"
            "2\t1.000000\tb_dogs/a.png\n"
            "3\t1.000000\tb_dogs/b.JPG\n"
            "4\t1.000000\tb_dogs/c.jpeg\n");
}

TEST_F(ImagePackTest, PacksImageListWithSeveralLabels) {
  const Image p = MakeImage(4, 6, 3, 7), q = MakeImage(8, 5, 1, 8);
  WriteBytes(dir_ / "data" / "sub" / "p.png", Png(p));
  WriteBytes(dir_ / "data" / "q.png", Png(q));
  WriteBytes(dir_ / "data" / "r.jpg", Jpeg(MakeImage(7, 7, 3, 9)));
  // Paths relative to the list's folder; the last line has one label; a blank line.
  WriteBytes(dir_ / "data" / "train.lst",
             "10\t1.5\t2\tsub/p.png\n"
             "3\t0\t7\tq.png\n"
             "\n"
             "42\t5\tr.jpg\n");
  PackOptions options;
  options.source = (dir_ / "data" / "train.lst").string();
  options.output = (dir_ / "list").string();
  auto summary = PackImages(options);
  ASSERT_THAT(summary, IsOk());
  EXPECT_EQ(summary->records, 3);
  EXPECT_TRUE(summary->classes.empty());
  EXPECT_FALSE(fs::exists(dir_ / "list.lst"));

  const std::vector<Packed> packed = ReadPacked(options.output);
  ASSERT_EQ(packed.size(), 3);
  EXPECT_EQ(packed[0].key, 10);
  EXPECT_EQ(packed[0].id, 10);
  EXPECT_THAT(packed[0].labels, ElementsAre(1.5f, 2.0f));
  EXPECT_EQ(DecodeImage(packed[0].image, 0)->pixels, p.pixels);
  EXPECT_EQ(packed[1].key, 3);
  EXPECT_EQ(packed[1].id, 3);
  EXPECT_THAT(packed[1].labels, ElementsAre(0.0f, 7.0f));
  EXPECT_EQ(DecodeImage(packed[1].image, 0)->pixels, q.pixels);
  EXPECT_EQ(packed[2].key, 42);
  EXPECT_THAT(packed[2].labels, ElementsAre(5.0f));
  EXPECT_EQ(packed[2].image, FileBytes(dir_ / "data" / "r.jpg"));

  // The same list elsewhere, with `root` naming the images' folder.
  fs::copy_file(dir_ / "data" / "train.lst", dir_ / "moved.lst");
  options.source = (dir_ / "moved.lst").string();
  options.root = (dir_ / "data").string();
  options.output = (dir_ / "moved").string();
  auto moved = PackImages(options);
  ASSERT_THAT(moved, IsOk());
  EXPECT_EQ(moved->records, 3);
  EXPECT_EQ(FileBytes(dir_ / "moved.rec"), FileBytes(dir_ / "list.rec"));
}

TEST_F(ImagePackTest, ListErrorsNameLineAndFile) {
  WriteBytes(dir_ / "a.png", Png(MakeImage(2, 2, 3, 1)));
  PackOptions options;
  options.source = (dir_ / "bad.lst").string();
  options.output = (dir_ / "out").string();
  for (absl::string_view bad : {"1\ta.png\n", "x\t0\ta.png\n", "1\tone\ta.png\n"}) {
    WriteBytes(dir_ / "bad.lst", absl::StrCat("0\t0\ta.png\n", bad));
    EXPECT_THAT(PackImages(options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(options.source), HasSubstr("line 2"))))
        << bad;
  }
  WriteBytes(dir_ / "bad.lst", "0\t0\ta.png\n1\t0\tmissing.png\n");
  EXPECT_THAT(PackImages(options), StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.png")));
}

TEST_F(ImagePackTest, ResizesShorterSide) {
  const fs::path src = dir_ / "images";
  const Image wide = MakeImage(20, 40, 3, 1);
  WriteBytes(src / "c" / "wide.png", Png(wide));
  WriteBytes(src / "c" / "tall.jpg", Jpeg(MakeImage(30, 15, 3, 2)));
  PackOptions options;
  options.source = src.string();
  options.output = (dir_ / "out").string();
  options.resize = 10;
  options.quality = 80;
  ASSERT_THAT(PackImages(options), IsOk());

  const std::vector<Packed> packed = ReadPacked(options.output);
  ASSERT_EQ(packed.size(), 2);
  // tall.jpg first (sorted): still a JPEG, 30x15 -> 20x10.
  EXPECT_EQ(packed[0].image.substr(0, 2), "\xff\xd8");
  auto tall = DecodeImage(packed[0].image, 0);
  ASSERT_THAT(tall, IsOk());
  EXPECT_EQ(tall->height, 20);
  EXPECT_EQ(tall->width, 10);
  // wide.png stays a PNG, 20x40 -> 10x20, with exactly the resized pixels.
  EXPECT_EQ(packed[1].image.substr(1, 3), "PNG");
  auto resized = DecodeImage(packed[1].image, 0);
  ASSERT_THAT(resized, IsOk());
  EXPECT_EQ(resized->height, 10);
  EXPECT_EQ(resized->width, 20);
  EXPECT_EQ(resized->pixels, ResizeShorter(wide, 10).pixels);
}

TEST_F(ImagePackTest, UndecodableImagesFailOrAreSkipped) {
  const fs::path src = dir_ / "images";
  const std::string png = Png(MakeImage(8, 8, 3, 1));
  WriteBytes(src / "c" / "bad.jpg", "not a jpeg at all");
  WriteBytes(src / "c" / "good.png", png);
  WriteBytes(src / "c" / "truncated.png", png.substr(0, png.size() / 2));
  PackOptions options;
  options.source = src.string();
  options.output = (dir_ / "out").string();
  EXPECT_THAT(PackImages(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr((src / "c" / "bad.jpg").string())));

  options.skip_bad = true;
  auto summary = PackImages(options);
  ASSERT_THAT(summary, IsOk());
  EXPECT_EQ(summary->records, 1);
  EXPECT_EQ(summary->skipped_bad, 2);
  const std::vector<Packed> packed = ReadPacked(options.output);
  ASSERT_EQ(packed.size(), 1);
  EXPECT_EQ(packed[0].id, 0);  // folder ids number the packed images
  EXPECT_EQ(packed[0].image, png);
  EXPECT_EQ(FileBytes(dir_ / "out.lst"), "0\t0.000000\tc/good.png\n");
}

TEST_F(ImagePackTest, BadSourcesAndOptions) {
  PackOptions options;
  options.output = (dir_ / "out").string();
  options.source = (dir_ / "nowhere").string();
  EXPECT_THAT(PackImages(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(options.source)));
  options.source = (dir_ / "nowhere.lst").string();
  EXPECT_THAT(PackImages(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(options.source)));

  WriteBytes(dir_ / "notes.txt", "hello");
  options.source = (dir_ / "notes.txt").string();
  EXPECT_THAT(PackImages(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(options.source)));

  options.source = dir_.string();
  options.quality = 0;
  EXPECT_THAT(PackImages(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.quality = 95;
  options.resize = -1;
  EXPECT_THAT(PackImages(options), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tessera::io
