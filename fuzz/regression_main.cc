// main() of the fuzz regression tests (CI): one gtest case per file of the folders given as
// arguments (corpus/<name>/ and regressions/<name>/, relative to the runfiles root), each
// running LLVMFuzzerTestOneInput once. A sanitizer report, a failed invariant (fuzz/require.h)
// or a crash ends the test binary, and Bazel reports the target failed; the log names the
// case that was running. Corpus.HasSeeds fails when no seed was found, so a broken data path
// cannot pass as an empty run.
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/input_files.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tessera::fuzz {
namespace {

class InputFileTest : public testing::Test {
 public:
  explicit InputFileTest(std::string path) : path_(std::move(path)) {}

  void TestBody() override {
    std::optional<std::string> bytes = ReadInputFile(path_);
    ASSERT_TRUE(bytes.has_value()) << "cannot read " << path_;
    EXPECT_EQ(
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), 0)
        << path_;
  }

 private:
  std::string path_;
};

// A gtest name from a file name: letters, digits and '_' only.
std::string CaseName(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// The folder's kind ("corpus", "regressions") names the suite.
std::string SuiteName(const std::string& dir) {
  return dir.find("regressions") != std::string::npos ? "Regressions" : "Corpus";
}

}  // namespace
}  // namespace tessera::fuzz

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using tessera::fuzz::InputFileTest;
  int seeds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string dir = argv[i];
    const std::string suite = tessera::fuzz::SuiteName(dir);
    for (const std::string& path : tessera::fuzz::ListInputFiles(dir)) {
      if (suite == "Corpus") ++seeds;
      testing::RegisterTest(suite.c_str(), tessera::fuzz::CaseName(path).c_str(), nullptr,
                            path.c_str(), __FILE__, __LINE__,
                            [path]() -> testing::Test* { return new InputFileTest(path); });
    }
  }
  testing::RegisterTest("Corpus", "HasSeeds", nullptr, nullptr, __FILE__, __LINE__,
                        [seeds]() -> testing::Test* {
                          struct HasSeeds : testing::Test {
                            explicit HasSeeds(int n) : n(n) {}
                            void TestBody() override { EXPECT_GT(n, 0) << "no seed inputs"; }
                            int n;
                          };
                          return new HasSeeds(seeds);
                        });
  return RUN_ALL_TESTS();
}
