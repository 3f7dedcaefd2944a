// RecordIO: round trips of records holding the magic word at every kind of position, the
// exact dmlc-core byte layout, re-syncing Seek() from every byte offset, byte-range splits
// covering every record once, the .idx index, the errors for corrupt and truncated files,
// and the image record payload of MXNet's recordio.pack.
#include "io/recordio.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/image_record.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// kRecordIOMagic as it lies in the file (little-endian).
const std::string kMagic("\x0a\x23\xd7\xce", 4);

// A path unique to the running test.
std::string TestPath(absl::string_view suffix) {
  return absl::StrCat(::testing::TempDir(), "recordio_",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name(), suffix);
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Word(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// Records with the magic word at aligned and unaligned positions, of it alone, ending with
// it, and random ones; `large` adds ~100 KB ones.
std::vector<std::string> VariedRecords(bool large) {
  std::mt19937 rng(20240601);
  std::vector<std::string> records = {
      "",
      "a",
      "abc",
      "abcd",
      "abcde",
      kMagic,                                    // only the magic word
      kMagic + kMagic + kMagic,                  // only magic words: three empty parts
      "abcd" + kMagic,                           // ends with it
      kMagic + "xyz",                            // starts with it
      "abcd" + kMagic + "efgh" + kMagic + "ij",  // aligned in the middle, twice
      "a" + kMagic + "bcdefg",                   // unaligned: not split
      "ab" + kMagic,                             // unaligned at the end
      "abc" + kMagic + "d" + kMagic,             // unaligned, then aligned at 8
      kMagic.substr(0, 3),                       // a prefix of it
  };
  for (int i = 0; i < 40; ++i) records.push_back(RandomBytes(rng, rng() % 300));
  for (int i = 0; i < 10; ++i) {
    std::string r = RandomBytes(rng, 50 + rng() % 100);
    r.replace(rng() % (r.size() - 4), 4, kMagic);
    records.push_back(std::move(r));
  }
  if (large) {
    records.push_back(RandomBytes(rng, 100000));
    std::string split = RandomBytes(rng, 100001);
    for (size_t at = 0; at + 4 <= split.size(); at += 996) split.replace(at, 4, kMagic);
    records.push_back(std::move(split));
    records.push_back("tail");
  }
  return records;
}

std::vector<uint64_t> WriteRecords(const std::string& path,
                                   const std::vector<std::string>& records) {
  auto writer = RecordIOWriter::Open(path);
  EXPECT_THAT(writer, IsOk());
  std::vector<uint64_t> offsets;
  for (const std::string& r : records) {
    auto offset = (*writer)->Write(r);
    EXPECT_THAT(offset, IsOk());
    offsets.push_back(*offset);
  }
  EXPECT_THAT((*writer)->Close(), IsOk());
  return offsets;
}

std::unique_ptr<RecordIOReader> OpenReader(const std::string& path) {
  auto reader = RecordIOReader::Open(path);
  EXPECT_THAT(reader, IsOk());
  return std::move(reader).value();
}

TEST(RecordIOTest, RoundTripsVariedRecords) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = VariedRecords(/*large=*/true);
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  auto reader = OpenReader(path);
  EXPECT_EQ(reader->file_size(), std::filesystem::file_size(path));
  EXPECT_EQ(reader->file_size() % 4, 0);

  std::string record;
  for (size_t i = 0; i < records.size(); ++i) {
    auto start = reader->Next(&record);
    ASSERT_THAT(start, IsOk());
    ASSERT_TRUE(start->has_value()) << "record " << i;
    EXPECT_EQ(**start, offsets[i]) << "record " << i;
    EXPECT_EQ(record, records[i]) << "record " << i;
  }
  auto end = reader->Next(&record);
  ASSERT_THAT(end, IsOk());
  EXPECT_FALSE(end->has_value());

  for (size_t i = 0; i < records.size(); ++i) {
    auto at = reader->ReadAt(offsets[i]);
    ASSERT_THAT(at, IsOk());
    EXPECT_EQ(*at, records[i]) << "record " << i;
  }
}

TEST(RecordIOTest, FileBytesMatchDmlcLayout) {
  const std::string path = TestPath(".rec");
  const std::vector<uint64_t> offsets =
      WriteRecords(path, {"hello", "abcd" + kMagic + "ef", kMagic + kMagic, "x" + kMagic + "yz"});
  EXPECT_THAT(offsets, ElementsAre(0, 16, 40, 64));
  // clang-format off
  const std::string expected = std::string(
      // "hello": cflag 0, length 5, 3 bytes of padding.
      "\x0a\x23\xd7\xce" "\x05\x00\x00\x00" "hello\0\0\0"
      // "abcd" magic "ef": first part (cflag 1) "abcd", last part (cflag 3) "ef", padded.
      "\x0a\x23\xd7\xce" "\x04\x00\x00\x20" "abcd"
      "\x0a\x23\xd7\xce" "\x02\x00\x00\x60" "ef\0\0"
      // Two magic words: three empty parts, cflag 1, 2, 3.
      "\x0a\x23\xd7\xce" "\x00\x00\x00\x20"
      "\x0a\x23\xd7\xce" "\x00\x00\x00\x40"
      "\x0a\x23\xd7\xce" "\x00\x00\x00\x60"
      // The magic word at offset 1 is not aligned: one whole part of 7 bytes.
      "\x0a\x23\xd7\xce" "\x07\x00\x00\x00" "x\x0a\x23\xd7\xce" "yz\0",
      80);
  // clang-format on
  EXPECT_EQ(FileBytes(path), expected);
}

TEST(RecordIOTest, ReadsHandWrittenMultiPartRecord) {
  const std::string path = TestPath(".rec");
  // A first part of 2 bytes (dmlc-core writes only multiples of 4 there, but reads any).
  WriteBytes(path, kMagic + Word(1u << 29 | 2) + std::string("ab\0\0", 4) + kMagic +
                       Word(3u << 29 | 1) + std::string("c\0\0\0", 4));
  auto record = OpenReader(path)->ReadAt(0);
  ASSERT_THAT(record, IsOk());
  EXPECT_EQ(*record, "ab" + kMagic + "c");
}

TEST(RecordIOTest, ReadAtIsThreadSafe) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = VariedRecords(/*large=*/false);
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  auto reader = OpenReader(path);
  for (int threads = 1; threads <= 4; ++threads) {
    std::vector<int> mismatches(threads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int pass = 0; pass < 20; ++pass) {
          for (size_t i = t; i < records.size(); i += 1 + pass % 3) {
            auto r = reader->ReadAt(offsets[i]);
            if (!r.ok() || *r != records[i]) ++mismatches[t];
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    EXPECT_THAT(mismatches, ::testing::Each(0)) << threads << " threads";
  }
}

// After Seek(o), Next() returns the first record starting at or after o.
void ExpectSeekFinds(RecordIOReader& reader, uint64_t o, const std::vector<uint64_t>& offsets,
                     const std::vector<std::string>& records) {
  ASSERT_THAT(reader.Seek(o), IsOk());
  const size_t want = std::lower_bound(offsets.begin(), offsets.end(), o) - offsets.begin();
  std::string record;
  auto start = reader.Next(&record);
  ASSERT_THAT(start, IsOk()) << "seek to " << o;
  if (want == offsets.size()) {
    EXPECT_FALSE(start->has_value()) << "seek to " << o;
    return;
  }
  ASSERT_TRUE(start->has_value()) << "seek to " << o;
  EXPECT_EQ(**start, offsets[want]) << "seek to " << o;
  EXPECT_EQ(record, records[want]) << "seek to " << o;
}

TEST(RecordIOTest, SeekToEveryByteResyncs) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = VariedRecords(/*large=*/false);
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  auto reader = OpenReader(path);
  for (uint64_t o = 0; o <= reader->file_size() + 5; ++o) {
    ExpectSeekFinds(*reader, o, offsets, records);
    if (::testing::Test::HasFailure()) return;
  }
  // Next() keeps going from a sought record.
  ASSERT_THAT(reader->Seek(offsets[5] + 1), IsOk());
  std::string record;
  for (size_t i = 6; i < records.size(); ++i) {
    auto start = reader->Next(&record);
    ASSERT_THAT(start, IsOk());
    ASSERT_TRUE(start->has_value());
    EXPECT_EQ(**start, offsets[i]);
    EXPECT_EQ(record, records[i]);
  }
}

TEST(RecordIOTest, SeekInsideMultiPartRecordSkipsItsContinuationHeaders) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = {"abcd" + kMagic + "efgh" + kMagic + "ij", "next"};
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  auto reader = OpenReader(path);
  // Parts: [0, 12) cflag 1, [12, 24) cflag 2, [24, 36) cflag 3; the headers at 12 and 24
  // hold the magic word but continue a record.
  EXPECT_EQ(offsets[1], 36);
  for (uint64_t o : {1, 4, 12, 13, 24, 35, 36}) ExpectSeekFinds(*reader, o, offsets, records);
}

TEST(RecordIOTest, SeekAcrossScanBlocks) {
  // Seek() reads 64 KiB at a time: put the next header just before, on and just after a
  // block edge, so that its magic word or lrec falls on either side.
  std::mt19937 rng(7);
  for (size_t first = 65512; first <= 65544; first += 4) {
    const std::string path = TestPath(absl::StrCat("_", first, ".rec"));
    const std::vector<std::string> records = {RandomBytes(rng, first), "second", "third"};
    const std::vector<uint64_t> offsets = WriteRecords(path, records);
    auto reader = OpenReader(path);
    for (uint64_t o = 1; o <= 12; ++o) ExpectSeekFinds(*reader, o, offsets, records);
    ExpectSeekFinds(*reader, offsets[1] + 1, offsets, records);
  }
}

TEST(RecordIOTest, ScanRecordOffsetsSplitsCoverEveryRecordOnce) {
  const std::string path = TestPath(".rec");
  const std::vector<uint64_t> offsets = WriteRecords(path, VariedRecords(/*large=*/true));
  const uint64_t size = std::filesystem::file_size(path);
  for (uint64_t n = 1; n <= 5; ++n) {
    std::vector<uint64_t> all;
    for (uint64_t k = 0; k < n; ++k) {
      auto part = ScanRecordOffsets(path, size * k / n, size * (k + 1) / n);
      ASSERT_THAT(part, IsOk());
      for (uint64_t o : *part) {
        EXPECT_GE(o, size * k / n);
        EXPECT_LT(o, size * (k + 1) / n);
      }
      all.insert(all.end(), part->begin(), part->end());
    }
    // In file order, each once: the parts are disjoint and together hold every record.
    EXPECT_THAT(all, ElementsAreArray(offsets)) << n << " parts";
  }
}

TEST(RecordIOTest, ScanRecordOffsetsOfEveryRange) {
  const std::string path = TestPath(".rec");
  const std::vector<uint64_t> offsets = WriteRecords(path, VariedRecords(/*large=*/false));
  const uint64_t size = std::filesystem::file_size(path);
  for (uint64_t begin = 0; begin <= size; begin += 3) {
    const uint64_t end = begin + 1 + begin % 97;
    std::vector<uint64_t> want;
    for (uint64_t o : offsets) {
      if (o >= begin && o < end) want.push_back(o);
    }
    auto got = ScanRecordOffsets(path, begin, end);
    ASSERT_THAT(got, IsOk());
    EXPECT_THAT(*got, ElementsAreArray(want)) << "[" << begin << ", " << end << ")";
  }
}

TEST(RecordIOTest, IndexRoundTrip) {
  const std::string path = TestPath(".idx");
  const std::vector<RecordIndexEntry> entries = {
      {0, 0}, {1, 16}, {7, 40}, {1ull << 40, 1ull << 33}};
  ASSERT_THAT(WriteRecordIndex(path, entries), IsOk());
  EXPECT_EQ(FileBytes(path), "0\t0\n1\t16\n7\t40\n1099511627776\t8589934592\n");
  auto read = ReadRecordIndex(path);
  ASSERT_THAT(read, IsOk());
  ASSERT_EQ(read->size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ((*read)[i].key, entries[i].key);
    EXPECT_EQ((*read)[i].offset, entries[i].offset);
  }
}

TEST(RecordIOTest, IndexWithMalformedLineNamesFileAndLine) {
  const std::string path = TestPath(".idx");
  for (absl::string_view bad : {"2\tx\n", "2 16\n", "2\t16\t3\n", "-2\t16\n"}) {
    WriteBytes(path, absl::StrCat("0\t0\n1\t8\n", bad, "3\t24\n"));
    EXPECT_THAT(ReadRecordIndex(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                                AllOf(HasSubstr(path), HasSubstr("line 3"))))
        << bad;
  }
}

TEST(RecordIOTest, MissingFilesAreNotFound) {
  const std::string path = TestPath("_missing.rec");
  EXPECT_THAT(RecordIOReader::Open(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_THAT(ScanRecordOffsets(path, 0, 100), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ReadRecordIndex(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_THAT(RecordIOWriter::Open(TestPath("_no_such_dir/x.rec")),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(RecordIOTest, RecordOf2To29BytesIsInvalid) {
  // Zero pages mapped on demand: a valid 512 MiB range that costs no memory.
  const size_t size = size_t{1} << 29;
  void* pages = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  auto writer = RecordIOWriter::Open(TestPath(".rec"));
  ASSERT_THAT(writer, IsOk());
  EXPECT_THAT((*writer)->Write(absl::string_view(static_cast<const char*>(pages), size)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2^29")));
  munmap(pages, size);
}

TEST(RecordIOTest, WriteAfterCloseFails) {
  auto writer = RecordIOWriter::Open(TestPath(".rec"));
  ASSERT_THAT(writer, IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  EXPECT_THAT((*writer)->Close(), IsOk());
  EXPECT_THAT((*writer)->Write("x"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Reads with Next() until the end or an error; returns the error (OK at the end) and how
// many records came before it.
absl::Status ReadAll(RecordIOReader& reader, int* count) {
  *count = 0;
  std::string record;
  while (true) {
    auto start = reader.Next(&record);
    if (!start.ok()) return start.status();
    if (!start->has_value()) return absl::OkStatus();
    ++*count;
  }
}

TEST(RecordIOTest, TruncatedFileIsDataLoss) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = {"first", "second record", "abcd" + kMagic + "efghij",
                                            "last"};
  // Each cut: bytes kept, the record it breaks, the offset the error names.
  struct Cut {
    uint64_t size;
    int record;
    uint64_t offset;
  };
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  const std::vector<Cut> cuts = {
      {offsets[1] + 5, 1, offsets[1]},            // inside the header
      {offsets[1] + 8 + 3, 1, offsets[1]},        // inside the payload
      {offsets[2] - 1, 1, offsets[1]},            // inside the padding
      {offsets[2] + 12 + 4, 2, offsets[2] + 12},  // inside the second part's header
      {offsets[3] - 2, 2, offsets[2] + 12},       // inside the second part's payload
  };
  for (const Cut& cut : cuts) {
    WriteRecords(path, records);
    std::filesystem::resize_file(path, cut.size);
    auto reader = OpenReader(path);
    int count = 0;
    EXPECT_THAT(ReadAll(*reader, &count),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(path), HasSubstr("truncated"),
                               HasSubstr(absl::StrCat("byte offset ", cut.offset)))))
        << "cut at " << cut.size;
    EXPECT_EQ(count, cut.record);
    EXPECT_THAT(reader->ReadAt(offsets[cut.record]),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
    EXPECT_THAT(ScanRecordOffsets(path, 0, cut.size), StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST(RecordIOTest, AbsurdLengthIsDataLossBeforeAllocating) {
  const std::string path = TestPath(".rec");
  WriteBytes(path, kMagic + Word((1u << 29) - 1) + "abcd");
  EXPECT_THAT(OpenReader(path)->ReadAt(0),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("truncated"), HasSubstr("byte offset 0"))));
}

TEST(RecordIOTest, OverwrittenMagicIsDataLoss) {
  const std::string path = TestPath(".rec");
  const std::vector<std::string> records = {"first", "second", "third"};
  const std::vector<uint64_t> offsets = WriteRecords(path, records);
  std::string bytes = FileBytes(path);
  bytes[offsets[1] + 2] ^= 0x40;
  WriteBytes(path, bytes);
  auto reader = OpenReader(path);
  const std::string where = absl::StrCat("byte offset ", offsets[1]);
  EXPECT_THAT(reader->ReadAt(offsets[1]),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("magic"), HasSubstr(where))));
  int count = 0;
  EXPECT_THAT(ReadAll(*reader, &count),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("magic"), HasSubstr(where))));
  EXPECT_EQ(count, 1);
  // A seek re-syncs past the damaged header.
  ExpectSeekFinds(*reader, offsets[1], {offsets[0], offsets[2]}, {records[0], records[2]});
}

TEST(RecordIOTest, ReadAtWhereNoRecordStartsIsDataLoss) {
  const std::string path = TestPath(".rec");
  const std::vector<uint64_t> offsets =
      WriteRecords(path, {"abcdefgh", "abcd" + kMagic + "efgh", "z"});
  auto reader = OpenReader(path);
  // Unaligned, inside a payload, on a continuation header, at and past the end.
  for (uint64_t o : {offsets[0] + 1, offsets[0] + 8, offsets[1] + 12, reader->file_size(),
                     reader->file_size() + 4}) {
    EXPECT_THAT(reader->ReadAt(o),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(path), HasSubstr(absl::StrCat("byte offset ", o)))))
        << o;
  }
}

TEST(RecordIOTest, PartsOutOfOrderAreDataLoss) {
  const std::string path = TestPath(".rec");
  // A first part followed by a whole record instead of a middle or last part.
  WriteBytes(path, kMagic + Word(1u << 29) + kMagic + Word(0));
  EXPECT_THAT(
      OpenReader(path)->ReadAt(0),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr(path), HasSubstr("out of order"), HasSubstr("byte offset 8"))));
}

// ---------------------------------------------------------------------------------------------
// Image records

TEST(ImageRecordTest, OneLabelIsStoredInTheHeader) {
  const std::string packed = PackImageRecord({3.5f}, 7, 9, "JPEGDATA");
  ASSERT_EQ(packed.size(), 24 + 8);
  uint32_t flag;
  float label;
  uint64_t id, id2;
  std::memcpy(&flag, packed.data(), 4);
  std::memcpy(&label, packed.data() + 4, 4);
  std::memcpy(&id, packed.data() + 8, 8);
  std::memcpy(&id2, packed.data() + 16, 8);
  EXPECT_EQ(flag, 0);
  EXPECT_EQ(label, 3.5f);
  EXPECT_EQ(id, 7);
  EXPECT_EQ(id2, 9);
  EXPECT_EQ(packed.substr(24), "JPEGDATA");

  auto unpacked = UnpackImageRecord(packed);
  ASSERT_THAT(unpacked, IsOk());
  EXPECT_THAT(unpacked->labels, ElementsAre(3.5f));
  EXPECT_EQ(unpacked->id, 7);
  EXPECT_EQ(unpacked->id2, 9);
  EXPECT_EQ(unpacked->image, "JPEGDATA");
}

TEST(ImageRecordTest, SeveralLabelsFollowTheHeader) {
  const std::string packed = PackImageRecord({1.0f, -2.5f, 3.0f}, 11, 0, "PNG");
  ASSERT_EQ(packed.size(), 24 + 12 + 3);
  uint32_t flag;
  float header_label, second;
  std::memcpy(&flag, packed.data(), 4);
  std::memcpy(&header_label, packed.data() + 4, 4);
  std::memcpy(&second, packed.data() + 24 + 4, 4);
  EXPECT_EQ(flag, 3);
  EXPECT_EQ(header_label, 0.0f);
  EXPECT_EQ(second, -2.5f);

  auto unpacked = UnpackImageRecord(packed);
  ASSERT_THAT(unpacked, IsOk());
  EXPECT_THAT(unpacked->labels, ElementsAre(1.0f, -2.5f, 3.0f));
  EXPECT_EQ(unpacked->id, 11);
  EXPECT_EQ(unpacked->image, "PNG");
}

TEST(ImageRecordTest, NoLabelsUnpackAsOneZero) {
  const std::string record = PackImageRecord({}, 1, 2, "x");  // `image` views into it
  auto unpacked = UnpackImageRecord(record);
  ASSERT_THAT(unpacked, IsOk());
  EXPECT_THAT(unpacked->labels, ElementsAre(0.0f));
  EXPECT_EQ(unpacked->image, "x");
}

TEST(ImageRecordTest, ShortRecordIsDataLoss) {
  EXPECT_THAT(UnpackImageRecord(std::string(23, '\0')), StatusIs(absl::StatusCode::kDataLoss));
  // Three labels promised, two present.
  const std::string packed = PackImageRecord({1.0f, 2.0f, 3.0f}, 5, 0, "");
  EXPECT_THAT(UnpackImageRecord(absl::string_view(packed).substr(0, 24 + 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("3 labels")));
  EXPECT_THAT(UnpackImageRecord(absl::string_view(packed)), IsOk());
}

}  // namespace
}  // namespace tessera::io
