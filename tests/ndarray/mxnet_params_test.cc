// MXNet's NDArray list file (ndarray/mxnet_params.h): files built byte by byte here from the
// format's definition in every layout (V2, V3, V1, legacy v0) and every dtype load with
// exact shapes and values; the writer's bytes equal hand-built ones and round trip; every
// truncation and corruption is an error naming the offset, never a crash or a huge
// allocation; sparse storage, bool and none arrays are refused by name.
#include "ndarray/mxnet_params.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "tests/gpu_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

constexpr uint32_t kV1 = 0xF993FAC8, kV2 = 0xF993FAC9, kV3 = 0xF993FACA;
// mshadow type flags.
constexpr int32_t kF32 = 0, kF64 = 1, kF16 = 2, kU8 = 3, kI32 = 4, kI8 = 5, kI64 = 6, kBool = 7,
                  kBF16 = 12;

// Little-endian bytes, written one at a time (independent of the reader's memcpy).
class ByteWriter {
 public:
  template <typename T>
  ByteWriter& Int(T value) {
    uint64_t bits = static_cast<uint64_t>(value);
    for (size_t i = 0; i < sizeof(T); ++i) bytes_.push_back(static_cast<char>(bits >> (8 * i)));
    return *this;
  }
  ByteWriter& U32(uint32_t v) { return Int(v); }
  ByteWriter& I32(int32_t v) { return Int(v); }
  ByteWriter& U64(uint64_t v) { return Int(v); }
  ByteWriter& I64(int64_t v) { return Int(v); }
  ByteWriter& F32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return U32(bits);
  }
  ByteWriter& F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return U64(bits);
  }
  ByteWriter& Raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  // dmlc's std::string: uint64 length, then the bytes.
  ByteWriter& Str(const std::string& s) { return U64(s.size()).Raw(s); }

  // The list file's head: magic 0x112, reserved, array count.
  ByteWriter& ListHead(uint64_t count) { return U64(0x112).U64(0).U64(count); }
  // TShape (V1-V3): int32 ndim, int64 dims.
  ByteWriter& TShape(const std::vector<int64_t>& dims) {
    I32(static_cast<int32_t>(dims.size()));
    for (int64_t d : dims) I64(d);
    return *this;
  }
  // Context: dev_type, dev_id.
  ByteWriter& Ctx(int32_t dev_type = 1, int32_t dev_id = 0) { return I32(dev_type).I32(dev_id); }
  // A dense V2 (or V3) array's header up to its data.
  ByteWriter& DenseHeader(uint32_t magic, const std::vector<int64_t>& dims, int32_t flag,
                          int32_t dev_type = 1, int32_t dev_id = 0) {
    return U32(magic).I32(0).TShape(dims).Ctx(dev_type, dev_id).I32(flag);
  }
  ByteWriter& Names(const std::vector<std::string>& names) {
    U64(names.size());
    for (const std::string& n : names) Str(n);
    return *this;
  }

  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class MxnetParamsTest : public testing::EngineTest {
 protected:
  absl::StatusOr<ArrayFileContents> Parse(const std::string& bytes,
                                          const std::string& source = "net.params") {
    return ParseMxnetParams(rt(), bytes, source);
  }

  static std::string Bytes(const NDArray& a) {
    std::string s(a.data().Bytes(), '\0');
    TESSERA_CHECK(a.SyncCopyToCPU(s.data(), a.Size()).ok());
    return s;
  }

  template <typename T>
  static std::vector<T> Values(const NDArray& a) {
    auto v = a.AsVector<T>();
    TESSERA_CHECK(v.ok());
    return *v;
  }

  // One array of every dtype Tessera and MXNet share, distinct shapes.
  std::vector<NDArray> EveryDType() { return testing::ArraysOfEveryDType(rt()); }

  // A valid named file with one array in each layout, for the truncation tests.
  static std::string EveryLayout() {
    ByteWriter w;
    w.ListHead(4);
    w.DenseHeader(kV2, {2}, kF32).F32(1.5f).F32(-2);
    w.DenseHeader(kV3, {}, kF64).F64(3.25);
    w.U32(kV1).TShape({1, 2}).Ctx().I32(kI32).I32(7).I32(-8);
    w.U32(2).U32(1).U32(1).Ctx().I32(kU8).Int<uint8_t>(9);  // v0: ndim 2, dims (1,1)
    w.Names({"arg:a", "arg:b", "aux:c", "d"});
    return w.bytes();
  }
};
TESSERA_INSTANTIATE_ENGINES(MxnetParamsTest);

TEST_P(MxnetParamsTest, ReadsV2WithArgAndAuxNamesAndIgnoresTheStoredContext) {
  ByteWriter w;
  w.ListHead(2);
  // Saved from gpu(1): loads on the CPU all the same.
  w.DenseHeader(kV2, {2, 3}, kF32, /*dev_type=*/2, /*dev_id=*/1);
  for (float v : {0.5f, -1.0f, 2.0f, 3.5f, -4.25f, 1e-3f}) w.F32(v);
  w.DenseHeader(kV2, {3}, kF32, /*dev_type=*/3).F32(0).F32(1).F32(2);
  w.Names({"arg:fc1_weight", "aux:bn0_moving_mean"});

  auto contents = Parse(w.bytes());
  ASSERT_THAT(contents, IsOk());
  EXPECT_TRUE(contents->named);
  EXPECT_THAT(contents->names, ElementsAre("arg:fc1_weight", "aux:bn0_moving_mean"));
  ASSERT_EQ(contents->arrays.size(), 2u);
  const NDArray& weight = contents->arrays[0];
  EXPECT_EQ(weight.shape(), (Shape{2, 3}));
  EXPECT_EQ(weight.dtype(), DType::kFloat32);
  EXPECT_EQ(weight.ctx(), Context::CPU());
  EXPECT_THAT(Values<float>(weight), ElementsAre(0.5f, -1.0f, 2.0f, 3.5f, -4.25f, 1e-3f));
  EXPECT_EQ(contents->arrays[1].shape(), (Shape{3}));
  EXPECT_THAT(Values<float>(contents->arrays[1]), ElementsAre(0, 1, 2));
}

TEST_P(MxnetParamsTest, ReadsV3WithAScalarAsShapeOne) {
  ByteWriter w;
  w.ListHead(2);
  w.DenseHeader(kV3, {2, 2}, kF64).F64(1).F64(-2).F64(0.25).F64(1e300);
  w.DenseHeader(kV3, {}, kI64).I64(-(int64_t{1} << 40));  // ndim 0: a scalar
  w.Names({"w", "step"});
  auto contents = Parse(w.bytes());
  ASSERT_THAT(contents, IsOk());
  EXPECT_EQ(contents->arrays[0].shape(), (Shape{2, 2}));
  EXPECT_THAT(Values<double>(contents->arrays[0]), ElementsAre(1, -2, 0.25, 1e300));
  EXPECT_EQ(contents->arrays[1].shape(), (Shape{1}));
  EXPECT_THAT(Values<int64_t>(contents->arrays[1]), ElementsAre(-(int64_t{1} << 40)));
}

TEST_P(MxnetParamsTest, ReadsV1AndLegacyV0) {
  ByteWriter w;
  w.ListHead(2);
  w.U32(kV1).TShape({3, 1}).Ctx().I32(kI32).I32(1).I32(-2).I32(2147483647);
  // v0: no magic; uint32 ndim, uint32 dims.
  w.U32(3).U32(1).U32(2).U32(2).Ctx(2, 0).I32(kF32);
  for (int i = 0; i < 4; ++i) w.F32(0.5f * static_cast<float>(i));
  w.Names({"arg:v1", "arg:v0"});
  auto contents = Parse(w.bytes());
  ASSERT_THAT(contents, IsOk());
  EXPECT_EQ(contents->arrays[0].shape(), (Shape{3, 1}));
  EXPECT_EQ(contents->arrays[0].dtype(), DType::kInt32);
  EXPECT_THAT(Values<int32_t>(contents->arrays[0]), ElementsAre(1, -2, 2147483647));
  EXPECT_EQ(contents->arrays[1].shape(), (Shape{1, 2, 2}));
  EXPECT_THAT(Values<float>(contents->arrays[1]), ElementsAre(0, 0.5f, 1, 1.5f));
}

TEST_P(MxnetParamsTest, ReadsEveryDTypeExactly) {
  struct Case {
    int32_t flag;
    DType dtype;
    std::string data;  // two elements
  };
  const std::vector<Case> cases = {
      {kF32, DType::kFloat32, ByteWriter().F32(1.25f).F32(-7).bytes()},
      {kF64, DType::kFloat64, ByteWriter().F64(0.1).F64(-1e-300).bytes()},
      {kF16, DType::kFloat16, ByteWriter().Int<uint16_t>(0x3C00).Int<uint16_t>(0xC200).bytes()},
      {kU8, DType::kUInt8, ByteWriter().Int<uint8_t>(0).Int<uint8_t>(255).bytes()},
      {kI32, DType::kInt32, ByteWriter().I32(-5).I32(1 << 30).bytes()},
      {kI8, DType::kInt8, ByteWriter().Int<int8_t>(-128).Int<int8_t>(127).bytes()},
      {kI64, DType::kInt64, ByteWriter().I64(-1).I64(int64_t{1} << 50).bytes()},
      {kBF16, DType::kBFloat16, ByteWriter().Int<uint16_t>(0x3F80).Int<uint16_t>(0xC000).bytes()},
  };
  ByteWriter w;
  w.ListHead(cases.size());
  for (const Case& c : cases) w.DenseHeader(kV2, {2}, c.flag).Raw(c.data);
  w.Names({});  // an unnamed list
  auto contents = Parse(w.bytes());
  ASSERT_THAT(contents, IsOk());
  EXPECT_FALSE(contents->named);
  EXPECT_TRUE(contents->names.empty());
  ASSERT_EQ(contents->arrays.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(contents->arrays[i].dtype(), cases[i].dtype) << i;
    EXPECT_EQ(contents->arrays[i].shape(), (Shape{2})) << i;
    EXPECT_EQ(Bytes(contents->arrays[i]), cases[i].data) << DTypeName(cases[i].dtype);
  }
  // The half types decode to the values their bit patterns mean.
  EXPECT_THAT(Values<Half>(contents->arrays[2]), ElementsAre(1.0f, -3.0f));
  EXPECT_THAT(Values<BFloat16>(contents->arrays[7]), ElementsAre(1.0f, -2.0f));
}

TEST_P(MxnetParamsTest, AnEmptyFileIsAnEmptyMap) {
  auto contents = Parse(ByteWriter().ListHead(0).Names({}).bytes());
  ASSERT_THAT(contents, IsOk());
  EXPECT_TRUE(contents->named);
  EXPECT_TRUE(contents->arrays.empty());
}

TEST_P(MxnetParamsTest, WriterBytesEqualTheFormatsDefinition) {
  std::vector<NDArray> arrays;
  arrays.push_back(*FromVector<float>(rt(), Shape{2, 2}, std::vector<float>{1, -2, 3.5f, 0}));
  arrays.push_back(*FromVector<int64_t>(rt(), Shape{1}, std::vector<int64_t>{-9}));
  auto bytes = SerializeMxnetParams({"arg:w", "aux:n"}, arrays);
  ASSERT_THAT(bytes, IsOk());
  ByteWriter want;
  want.ListHead(2);
  want.DenseHeader(kV2, {2, 2}, kF32).F32(1).F32(-2).F32(3.5f).F32(0);
  want.DenseHeader(kV2, {1}, kI64).I64(-9);
  want.Names({"arg:w", "aux:n"});
  EXPECT_EQ(*bytes, want.bytes());

  auto unnamed = SerializeMxnetParams({}, arrays);
  ASSERT_THAT(unnamed, IsOk());
  EXPECT_EQ(unnamed->size(), want.bytes().size() - (2 * 8 + 5 + 5));  // no names
  EXPECT_TRUE(LooksLikeMxnetParams(*unnamed));
}

TEST_P(MxnetParamsTest, RoundTripsEveryDType) {
  const std::vector<NDArray> arrays = EveryDType();
  std::vector<std::string> names;
  for (size_t i = 0; i < arrays.size(); ++i) names.push_back("arg:p" + std::to_string(i));
  for (bool named : {true, false}) {
    auto bytes = SerializeMxnetParams(named ? names : std::vector<std::string>{}, arrays);
    ASSERT_THAT(bytes, IsOk());
    auto contents = Parse(*bytes);
    ASSERT_THAT(contents, IsOk());
    EXPECT_EQ(contents->named, named);
    EXPECT_EQ(contents->names, named ? names : std::vector<std::string>{});
    ASSERT_EQ(contents->arrays.size(), arrays.size());
    for (size_t i = 0; i < arrays.size(); ++i) {
      EXPECT_EQ(contents->arrays[i].shape(), arrays[i].shape());
      EXPECT_EQ(contents->arrays[i].dtype(), arrays[i].dtype());
      EXPECT_EQ(Bytes(contents->arrays[i]), Bytes(arrays[i])) << DTypeName(arrays[i].dtype());
    }
  }
}

TEST_P(MxnetParamsTest, SavesAMapAndLoadsItBack) {
  const std::string path = ::testing::TempDir() + "/saved.params";
  std::map<std::string, NDArray> params;
  params["arg:b"] = *FromVector<float>(rt(), Shape{2}, std::vector<float>{1, 2});
  params["aux:a"] = *FromVector<double>(rt(), Shape{1, 1}, std::vector<double>{-3});
  ASSERT_THAT(SaveMxnetParams(path, params), IsOk());
  auto contents = LoadMxnetParams(rt(), path);
  ASSERT_THAT(contents, IsOk());
  EXPECT_THAT(contents->names, ElementsAre("arg:b", "aux:a"));
  EXPECT_THAT(Values<float>(contents->arrays[0]), ElementsAre(1, 2));
  EXPECT_THAT(Values<double>(contents->arrays[1]), ElementsAre(-3));
  EXPECT_THAT(LoadMxnetParams(rt(), path + ".missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("saved.params.missing")));
}

TEST_P(MxnetParamsTest, WriterRefusesBadNamesAndNoneArrays) {
  const std::vector<NDArray> two = {*FromVector<float>(rt(), Shape{1}, std::vector<float>{1}),
                                    *FromVector<float>(rt(), Shape{1}, std::vector<float>{2})};
  EXPECT_THAT(SerializeMxnetParams({"a"}, two),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 names for 2 arrays")));
  EXPECT_THAT(SerializeMxnetParams({"arg:x", "arg:x"}, two),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"arg:x\"")));
  const std::vector<NDArray> with_none = {two[0], NDArray()};
  EXPECT_THAT(SerializeMxnetParams({"a", "b"}, with_none),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array 1 (\"b\") is none")));
}

TEST_P(MxnetParamsTest, EveryTruncationIsAnErrorNamingTheOffset) {
  const std::string full = EveryLayout();
  ASSERT_THAT(Parse(full), IsOk());
  for (size_t n = 0; n < full.size(); ++n) {
    auto contents = Parse(full.substr(0, n), "cut.params");
    EXPECT_THAT(contents, AnyOf(StatusIs(absl::StatusCode::kDataLoss),
                                StatusIs(absl::StatusCode::kInvalidArgument)))
        << n;
    EXPECT_THAT(std::string(contents.status().message()),
                AllOf(HasSubstr("cut.params"), ContainsRegex("byte [0-9]+")))
        << n;
  }
  EXPECT_THAT(Parse(full + "x"), StatusIs(absl::StatusCode::kDataLoss,
                                          HasSubstr(absl::StrCat("corrupt at byte ", full.size(),
                                                                 ": 1 bytes after the names"))));
}

TEST_P(MxnetParamsTest, RefusesAFileWithoutTheListMagic) {
  EXPECT_THAT(Parse(ByteWriter().U64(0x113).U64(0).U64(0).U64(0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("net.params"), HasSubstr("0x113"), HasSubstr("0x112"))));
  EXPECT_THAT(Parse("TSRNDARR\1\0\0\0\0\0\0\0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(LooksLikeMxnetParams("TSRNDARR"));
  EXPECT_FALSE(LooksLikeMxnetParams("\x12\x01"));
  EXPECT_TRUE(LooksLikeMxnetParams(ByteWriter().U64(0x112).bytes()));
}

TEST_P(MxnetParamsTest, RefusesSparseStorageByName) {
  // row_sparse (3,2) holding row 1: storage shape (1,2), one int64 index array.
  ByteWriter w;
  w.ListHead(3);
  w.DenseHeader(kV2, {1}, kF32).F32(1);
  w.U32(kV2).I32(1).TShape({1, 2}).TShape({3, 2}).Ctx().I32(kF32).I32(kI64).TShape({1});
  w.F32(5).F32(6).I64(1);
  // csr (2,3) with 1 value: values (1), indptr int64 (3), indices int64 (1).
  w.U32(kV2).I32(2).TShape({1}).TShape({2, 3}).Ctx().I32(kF32);
  w.I32(kI64).TShape({3}).I32(kI64).TShape({1});
  w.F32(4).I64(0).I64(1).I64(1).I64(2);
  w.Names({"arg:dense", "arg:embed_weight", "arg:csr_weight"});
  EXPECT_THAT(Parse(w.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("array 1 (\"arg:embed_weight\") at byte 60"),
                             HasSubstr("row_sparse storage"))));

  ByteWriter csr;
  csr.ListHead(1);
  csr.U32(kV2).I32(2).TShape({1}).TShape({2, 3}).Ctx().I32(kF32);
  csr.I32(kI64).TShape({3}).I32(kI64).TShape({1});
  csr.F32(4).I64(0).I64(1).I64(1).I64(2);
  csr.Names({"arg:csr_weight"});
  EXPECT_THAT(Parse(csr.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("array 0 (\"arg:csr_weight\")"), HasSubstr("csr storage"))));
}

TEST_P(MxnetParamsTest, RefusesTypesTesseraLacksByName) {
  ByteWriter w;
  w.ListHead(1).DenseHeader(kV2, {2}, kBool).Int<uint8_t>(1).Int<uint8_t>(0).Names({"arg:mask"});
  EXPECT_THAT(Parse(w.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("array 0 (\"arg:mask\")"), HasSubstr("dtype bool"))));
  ByteWriter u16;
  u16.ListHead(1).DenseHeader(kV2, {1}, 9).Int<uint16_t>(3).Names({});
  EXPECT_THAT(Parse(u16.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array 0 at byte 24")));
  ByteWriter unknown;
  unknown.ListHead(1).DenseHeader(kV2, {1}, 99).F32(0).Names({});
  EXPECT_THAT(Parse(unknown.bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("corrupt at byte 52: the type flag of array 0 is 99")));
}

TEST_P(MxnetParamsTest, RefusesNoneAndEmptyArraysByName) {
  // A none array ends at its shape; the array after it is still found.
  const std::vector<std::string> none_arrays = {
      ByteWriter().U32(kV2).I32(0).I32(0).bytes(),           // V2, ndim 0
      ByteWriter().U32(kV2).I32(0).I32(-1).bytes(),          // V2, ndim -1
      ByteWriter().U32(kV3).I32(0).I32(-1).bytes(),          // V3, ndim -1
      ByteWriter().U32(kV3).I32(0).TShape({2, -1}).bytes(),  // V3, an unknown dim
      ByteWriter().U32(kV1).I32(0).bytes(),                  // V1, ndim 0
      ByteWriter().U32(0).bytes(),                           // v0, ndim 0
  };
  for (const std::string& none : none_arrays) {
    ByteWriter w;
    w.ListHead(2).Raw(none).DenseHeader(kV2, {1}, kF32).F32(1).Names({"arg:none", "arg:x"});
    EXPECT_THAT(Parse(w.bytes()), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("array 0 (\"arg:none\") at byte 24"),
                                                 HasSubstr("none array"))));
  }
  ByteWriter empty;
  empty.ListHead(1).DenseHeader(kV3, {2, 0}, kF32).Names({"arg:empty"});
  EXPECT_THAT(Parse(empty.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("\"arg:empty\""), HasSubstr("(2,0) has no elements"))));
  ByteWriter many_dims;
  many_dims.ListHead(1).DenseHeader(kV2, std::vector<int64_t>(33, 1), kF32).F32(1).Names({});
  EXPECT_THAT(Parse(many_dims.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("33 dims")));
}

TEST_P(MxnetParamsTest, NameErrorsAreNamed) {
  ByteWriter counts;
  counts.ListHead(2).DenseHeader(kV2, {1}, kF32).F32(1).DenseHeader(kV2, {1}, kF32).F32(2);
  const size_t names_at = counts.bytes().size();
  counts.Names({"arg:only"});
  EXPECT_THAT(
      Parse(counts.bytes()),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr(absl::StrCat("corrupt at byte ", names_at, ": 1 names for 2 arrays"))));
  ByteWriter repeated;
  repeated.ListHead(2).DenseHeader(kV2, {1}, kF32).F32(1).DenseHeader(kV2, {1}, kF32).F32(2);
  repeated.Names({"arg:w", "arg:w"});
  EXPECT_THAT(Parse(repeated.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"arg:w\" at byte 125 names both array 0 and array 1")));
}

TEST_P(MxnetParamsTest, AbsurdLengthsAllocateNothing) {
  const auto expect_data_loss = [&](const ByteWriter& w, const std::string& message) {
    EXPECT_THAT(Parse(w.bytes()), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(message)));
  };
  expect_data_loss(ByteWriter().ListHead(uint64_t{1} << 60),
                   "corrupt at byte 16: array count 1152921504606846976 cannot fit");
  expect_data_loss(ByteWriter().ListHead(1).U32(kV2).I32(0).I32(0x7fffffff),
                   "truncated at byte 36 reading the dims of the shape of array 0");
  expect_data_loss(ByteWriter().ListHead(1).U32(0xF0000000),  // v0 ndim
                   "truncated at byte 28 reading the dims of array 0");
  expect_data_loss(ByteWriter().ListHead(1).DenseHeader(kV2, {int64_t{1} << 40, 4}, kF32),
                   "reading the data of array 0 (needs 17592186044416 bytes");
  expect_data_loss(ByteWriter().ListHead(1).DenseHeader(kV2, {int64_t{1} << 40, 1 << 30}, kF64),
                   "the size of the data of array 0 overflows");
  expect_data_loss(ByteWriter().ListHead(1).U32(kV2).I32(0).TShape({3, -5}),
                   "corrupt at byte 32: dim -5 in the shape of array 0");
  expect_data_loss(ByteWriter().ListHead(1).U32(kV2).I32(7),
                   "corrupt at byte 28: unknown storage type 7 of array 0");
  expect_data_loss(ByteWriter().ListHead(1).U32(kV2).I32(0).I32(-2),
                   "corrupt at byte 32: ndim -2 of the shape of array 0");
  ByteWriter name;
  name.ListHead(1).DenseHeader(kV2, {1}, kF32).F32(1).U64(1).U64(uint64_t{1} << 62);
  expect_data_loss(name, "reading the name of array 0 (needs 4611686018427387904 bytes");
}

TEST_P(MxnetParamsTest, GpuArraysSaveFromAndLoadOntoTheDevice) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto cpu = FromVector<float>(rt(), Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  ASSERT_THAT(cpu, IsOk());
  auto gpu = NDArray::Empty(rt(), Shape{2, 2}, Context::GPU(0));
  ASSERT_THAT(gpu, IsOk());
  ASSERT_THAT(gpu->SyncCopyFromCPU(Values<float>(*cpu).data(), 4), IsOk());
  auto from_gpu = SerializeMxnetParams({"arg:w"}, {*gpu});
  auto from_cpu = SerializeMxnetParams({"arg:w"}, {*cpu});
  ASSERT_THAT(from_gpu, IsOk());
  EXPECT_EQ(*from_gpu, *from_cpu);  // written as cpu(0) either way
  auto loaded = ParseMxnetParams(rt(), *from_gpu, "gpu.params", Context::GPU(0));
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->arrays[0].ctx(), Context::GPU(0));
  EXPECT_THAT(Values<float>(loaded->arrays[0]), ElementsAre(1, 2, 3, 4));
}

}  // namespace
}  // namespace tessera
