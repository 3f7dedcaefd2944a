// Parameter files (ndarray/params_file.h): one loader for Tessera's and MXNet's formats, told
// apart by their magic; the saver writes either; unnamed lists and other files are refused
// naming the path.
#include "ndarray/params_file.h"

#include <map>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/mxnet_params.h"
#include "ndarray/ndarray.h"
#include "ndarray/serialization.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class ParamsFileTest : public testing::EngineTest {
 protected:
  std::map<std::string, NDArray> Params() {
    std::map<std::string, NDArray> params;
    params["arg:fc_weight"] =
        *FromVector<float>(rt(), Shape{2, 3}, std::vector<float>{1, 2, 3, -4, 5.5f, 6});
    params["arg:fc_bias"] = *FromVector<Half>(rt(), Shape{2}, std::vector<Half>{0.5f, -1.0f});
    params["aux:bn_moving_var"] = *FromVector<double>(rt(), Shape{1}, std::vector<double>{2});
    params["step"] = *FromVector<int64_t>(rt(), Shape{1}, std::vector<int64_t>{7});
    return params;
  }

  static std::string Bytes(const NDArray& a) {
    std::string s(a.data().Bytes(), '\0');
    TESSERA_CHECK(a.SyncCopyToCPU(s.data(), a.Size()).ok());
    return s;
  }

  static std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }
};
TESSERA_INSTANTIATE_ENGINES(ParamsFileTest);

TEST_P(ParamsFileTest, ParsesFormatNames) {
  EXPECT_THAT(ParseParamsFormat("tessera"), testing::IsOkAndHolds(ParamsFormat::kTessera));
  EXPECT_THAT(ParseParamsFormat("mxnet"), testing::IsOkAndHolds(ParamsFormat::kMxnet));
  EXPECT_THAT(ParseParamsFormat("onnx"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'onnx'")));
}

TEST_P(ParamsFileTest, SavesAndLoadsBothFormatsAlike) {
  const std::map<std::string, NDArray> params = Params();
  for (auto [format, name] :
       {std::pair{ParamsFormat::kTessera, "p.tsr"}, std::pair{ParamsFormat::kMxnet, "p.params"}}) {
    const std::string path = Path(name);
    ASSERT_THAT(SaveParamsFile(path, params, format), IsOk());
    auto bytes = ReadFileToString(path);
    ASSERT_THAT(bytes, IsOk());
    EXPECT_EQ(LooksLikeArrayFile(*bytes), format == ParamsFormat::kTessera) << name;
    EXPECT_EQ(LooksLikeMxnetParams(*bytes), format == ParamsFormat::kMxnet) << name;

    auto loaded = LoadParamsFile(rt(), path);
    ASSERT_THAT(loaded, IsOk());
    ASSERT_EQ(loaded->size(), params.size()) << name;
    for (const auto& [key, array] : params) {
      ASSERT_TRUE(loaded->contains(key)) << key;
      const NDArray& got = loaded->at(key);
      EXPECT_EQ(got.shape(), array.shape()) << key;
      EXPECT_EQ(got.dtype(), array.dtype()) << key;
      EXPECT_EQ(Bytes(got), Bytes(array)) << key;
    }
  }
}

TEST_P(ParamsFileTest, RefusesUnnamedListsAndOtherFiles) {
  const std::vector<NDArray> list = {*FromVector<float>(rt(), Shape{1}, std::vector<float>{1})};
  const std::string mxnet_list = Path("list.params");
  auto bytes = SerializeMxnetParams({}, list);
  ASSERT_THAT(bytes, IsOk());
  ASSERT_THAT(WriteStringToFile(mxnet_list, *bytes), IsOk());
  EXPECT_THAT(LoadParamsFile(rt(), mxnet_list),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(mxnet_list), HasSubstr("1 arrays without names"))));
  const std::string tessera_list = Path("list.tsr");
  ASSERT_THAT(SaveArrays(tessera_list, list), IsOk());
  EXPECT_THAT(LoadParamsFile(rt(), tessera_list),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without names")));

  const std::string text = Path("notes.txt");
  ASSERT_THAT(WriteStringToFile(text, "not parameters at all\n"), IsOk());
  EXPECT_THAT(LoadParamsFile(rt(), text),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(text), HasSubstr("not a parameter file"))));
  EXPECT_THAT(LoadParamsFile(rt(), Path("missing.params")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.params")));

  // A damaged file keeps its loader's DATA_LOSS.
  const std::string cut = Path("cut.params");
  ASSERT_THAT(WriteStringToFile(cut, bytes->substr(0, 30)), IsOk());
  EXPECT_THAT(LoadParamsFile(rt(), cut),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated at byte 28")));
}

}  // namespace
}  // namespace tessera
