// Serialization: array files (lists and maps) round trip every dtype; truncation at every
// offset and corruption are errors naming the file, never crashes; .npy interop with
// byte-exact NumPy headers; the Tensor protobuf.
#include "ndarray/serialization.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "proto/tensor.pb.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::IsOkAndHolds;
using testing::StatusIs;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class SerializationTest : public testing::EngineTest {
 protected:
  // One array of every dtype, distinct shapes.
  std::vector<NDArray> EveryDType() { return testing::ArraysOfEveryDType(rt()); }

  static std::string Bytes(const NDArray& a) {
    std::string s(a.data().Bytes(), '\0');
    TESSERA_CHECK(a.SyncCopyToCPU(s.data(), a.Size()).ok());
    return s;
  }

  static void ExpectSame(const NDArray& a, const NDArray& b) {
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(Bytes(a), Bytes(b)) << DTypeName(a.dtype());
  }
};
TESSERA_INSTANTIATE_ENGINES(SerializationTest);

TEST_P(SerializationTest, ListRoundTripEveryDType) {
  std::vector<NDArray> arrays = EveryDType();
  const std::string path = TempPath("list.tsr");
  ASSERT_THAT(SaveArrays(path, arrays), IsOk());
  auto loaded = LoadArrays(rt(), path);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) ExpectSame(arrays[i], (*loaded)[i]);
  EXPECT_THAT(LoadArrayMap(rt(), path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
}

TEST_P(SerializationTest, MapRoundTripAndViews) {
  std::vector<NDArray> arrays = EveryDType();
  // A view saves only its own elements.
  std::map<std::string, NDArray> named = {
      {"weight", arrays[0]}, {"bias", *arrays[1].Slice(1, 3)}, {"", arrays[6]}};
  const std::string path = TempPath("map.tsr");
  ASSERT_THAT(SaveArrays(path, named), IsOk());
  auto loaded = LoadArrayMap(rt(), path);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->size(), 3u);
  for (const auto& [name, a] : named) ExpectSame(a, loaded->at(name));
  EXPECT_THAT(loaded->at("bias").AsVector<double>(), IsOkAndHolds(ElementsAre(0.2, 1e300)));

  ASSERT_THAT(SaveArrays(path, std::map<std::string, NDArray>{}), IsOk());
  EXPECT_THAT(LoadArrayMap(rt(), path), IsOkAndHolds(::testing::IsEmpty()));
}

TEST_P(SerializationTest, HeaderLayoutIsAsDocumented) {
  auto a = FromVector<int32_t>(rt(), Shape{2}, std::vector<int32_t>{1, -1});
  auto bytes = EncodeArrays({*a}, {std::string("x")});
  ASSERT_THAT(bytes, IsOk());
  const std::string expected = std::string("TSRNDARR") + std::string("\1\0\0\0", 4) +
                               std::string("\1\0\0\0", 4) + std::string("\1\0\0\0\0\0\0\0", 8) +
                               std::string("\1\0\0\0x", 5) + std::string("\4\0\0\0", 4) +
                               std::string("\1\0\0\0", 4) + std::string("\2\0\0\0\0\0\0\0", 8) +
                               std::string("\1\0\0\0\xff\xff\xff\xff", 8);
  EXPECT_EQ(*bytes, expected);
}

TEST_P(SerializationTest, TruncationAtEveryOffsetIsDataLossNamingTheSource) {
  std::vector<NDArray> arrays = EveryDType();
  std::vector<std::string> names;
  for (size_t i = 0; i < arrays.size(); ++i) names.push_back("array" + std::to_string(i));
  for (bool named : {false, true}) {
    auto bytes = named ? EncodeArrays(arrays, names) : EncodeArrays(arrays);
    ASSERT_THAT(bytes, IsOk());
    for (size_t len = 0; len < bytes->size(); ++len) {
      auto r = DecodeArrays(rt(), bytes->substr(0, len), "cut.tsr");
      ASSERT_FALSE(r.ok()) << len;
      if (len < 8) {
        EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut.tsr")));
      } else {
        EXPECT_THAT(r, StatusIs(absl::StatusCode::kDataLoss,
                                AllOf(HasSubstr("cut.tsr"), HasSubstr("truncated"))))
            << len;
      }
    }
    EXPECT_THAT(DecodeArrays(rt(), *bytes + "x", "long.tsr"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("after the last array")));
  }
  // And through real files at a few offsets.
  auto bytes = EncodeArrays(arrays);
  for (size_t len : {size_t{9}, size_t{20}, size_t{30}, bytes->size() - 1}) {
    const std::string path = TempPath("cut" + std::to_string(len) + ".tsr");
    WriteRaw(path, bytes->substr(0, len));
    EXPECT_THAT(LoadArrays(rt(), path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
  }
}

TEST_P(SerializationTest, CorruptFieldsAreErrorsNotCrashes) {
  auto a = FromVector<float>(rt(), Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  const std::string good = *EncodeArrays({*a});
  auto corrupt = [&](size_t at, std::string value) {
    std::string b = good;
    b.replace(at, value.size(), value);
    return DecodeArrays(rt(), b, "bad.tsr");
  };
  EXPECT_THAT(corrupt(0, "XXXX"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("bad.tsr"), HasSubstr("magic"))));
  EXPECT_THAT(corrupt(8, std::string("\7\0\0\0", 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 7")));
  EXPECT_THAT(corrupt(12, std::string("\6\0\0\0", 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("flags")));
  EXPECT_THAT(corrupt(16, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("count")));
  EXPECT_THAT(corrupt(24, std::string("\x09\0\0\0", 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dtype 9")));
  EXPECT_THAT(corrupt(28, std::string("\0\0\0\0", 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ndim 0")));
  EXPECT_THAT(corrupt(28, std::string("\xff\0\0\0", 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ndim 255")));
  EXPECT_THAT(corrupt(32, std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("(-2,2)")));
  EXPECT_THAT(corrupt(32, std::string("\0\0\0\0\0\0\0\x40", 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad.tsr")));
  EXPECT_THAT(corrupt(32, std::string("\3\0\0\0\0\0\0\0", 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  EXPECT_THAT(LoadArrays(rt(), TempPath("does_not_exist.tsr")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does_not_exist.tsr")));
  // A random-byte fuzz of the header never crashes.
  for (size_t at = 0; at < 48; ++at) {
    for (int v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string b = good;
      b[at] = static_cast<char>(v);
      (void)DecodeArrays(rt(), b, "fuzz.tsr");
    }
  }
}

TEST_P(SerializationTest, NpyRoundTripAndExactHeader) {
  auto a = FromVector<float>(rt(), Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  auto bytes = EncodeNpy(*a);
  ASSERT_THAT(bytes, IsOk());
  // What numpy.save writes for np.arange(1, 7, dtype='<f4').reshape(2, 3): the dict padded
  // with spaces to 128 bytes in all, then the data.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  EXPECT_EQ(bytes->substr(0, 128),
            std::string("\x93NUMPY\x01\x00", 8) + std::string("\x76\x00", 2) + header);
  EXPECT_EQ(bytes->size(), 128u + 24u);

  std::vector<NDArray> arrays = EveryDType();
  for (const NDArray& x : arrays) {
    const std::string path = TempPath(std::string("x_") + DTypeName(x.dtype()) + ".npy");
    if (x.dtype() == DType::kBFloat16) {
      EXPECT_THAT(SaveNpy(path, x),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bfloat16")));
      continue;
    }
    ASSERT_THAT(SaveNpy(path, x), IsOk());
    auto back = LoadNpy(rt(), path);
    ASSERT_THAT(back, IsOk());
    ExpectSame(x, *back);
  }
}

std::string NpyFile(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

TEST_P(SerializationTest, NpyHeaderVariantsAndRejections) {
  // Scalar, other key order, 1-tuples, double quotes.
  auto s = DecodeNpy(rt(),
                     NpyFile("{'shape': (), 'fortran_order': False, 'descr': '<f8'}",
                             std::string("\0\0\0\0\0\0\xf0\x3f", 8)),
                     "s.npy");
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->shape(), (Shape{1}));
  EXPECT_THAT(s->AsVector<double>(), IsOkAndHolds(ElementsAre(1.0)));
  auto u = DecodeNpy(
      rt(),
      NpyFile("{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (3,)}", "\x01\x02\x03"),
      "u.npy");
  EXPECT_THAT(u->AsVector<uint8_t>(), IsOkAndHolds(ElementsAre(1, 2, 3)));

  auto bad = [&](const std::string& dict, const std::string& data) {
    return DecodeNpy(rt(), NpyFile(dict, data), "bad.npy");
  };
  EXPECT_THAT(bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", std::string(8, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("bad.npy"), HasSubstr("fortran_order"))));
  EXPECT_THAT(bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big-endian")));
  EXPECT_THAT(bad("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'<c8'")));
  EXPECT_THAT(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero-size")));
  EXPECT_THAT(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", std::string(8, 0)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("12 bytes")));
  EXPECT_THAT(bad("{'descr': '<f4', 'shape': (2,), }", std::string(8, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fortran_order")));
  EXPECT_THAT(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.npy")));
  EXPECT_THAT(DecodeNpy(rt(), "PK\3\4 zip file", "z.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a .npy")));
  // Truncation anywhere: an error, never a crash.
  const std::string good =
      *EncodeNpy(*FromVector<int64_t>(rt(), Shape{3}, std::vector<int64_t>{1, 2, 3}));
  for (size_t len = 0; len < good.size(); ++len) {
    auto r = DecodeNpy(rt(), good.substr(0, len), "t.npy");
    EXPECT_TRUE(r.status().code() == absl::StatusCode::kDataLoss ||
                r.status().code() == absl::StatusCode::kInvalidArgument)
        << len << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("t.npy"));
  }
}

TEST_P(SerializationTest, TensorProtoRoundTrip) {
  for (const NDArray& x : EveryDType()) {
    Tensor proto;
    ASSERT_THAT(ToTensorProto(x, &proto), IsOk());
    EXPECT_EQ(static_cast<int>(proto.dtype()), static_cast<int>(x.dtype()));
    EXPECT_THAT(proto.shape(), ::testing::ElementsAreArray(x.shape().dims()));
    // Through the wire bytes too.
    Tensor parsed;
    ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
    auto back = FromTensorProto(rt(), parsed);
    ASSERT_THAT(back, IsOk());
    ExpectSame(x, *back);
  }
  Tensor t;
  t.set_dtype(DT_INT32);
  t.add_shape(2);
  t.set_data(std::string(4, '\0'));
  EXPECT_THAT(FromTensorProto(rt(), t), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 AllOf(HasSubstr("4 bytes"), HasSubstr("8"))));
  t.set_data(std::string(8, '\0'));
  t.set_shape(0, 0);
  EXPECT_THAT(FromTensorProto(rt(), t), StatusIs(absl::StatusCode::kInvalidArgument));
  t.clear_shape();
  EXPECT_THAT(FromTensorProto(rt(), t), StatusIs(absl::StatusCode::kInvalidArgument));
  t.add_shape(2);
  t.set_dtype(static_cast<DataType>(9));
  EXPECT_THAT(FromTensorProto(rt(), t),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype 9")));
}

}  // namespace
}  // namespace tessera
