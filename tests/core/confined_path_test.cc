// core/confined_path.h on a real folder tree with symbolic links, a FIFO and devices.
#include "core/confined_path.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ConfinedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) / "confined";
    fs::remove_all(base_);
    root_ = base_ / "root";
    fs::create_directories(root_ / "sub");
    std::ofstream(root_ / "sub" / "data.csv") << "1,2\n";
    std::ofstream(base_ / "secret") << "s3cret\n";
    fs::create_symlink(base_ / "secret", root_ / "leak");
    fs::create_symlink(root_ / "sub" / "data.csv", root_ / "alias.csv");
    fs::create_directory_symlink(base_, root_ / "up");
    ASSERT_EQ(mkfifo((root_ / "fifo").c_str(), 0600), 0);
  }

  fs::path base_, root_;
};

TEST_F(ConfinedPathTest, FilesUnderTheRootResolveToTheirRealPath) {
  const std::string data = (root_ / "sub" / "data.csv").string();
  EXPECT_EQ(ConfinePath(root_, "sub/data.csv", PathUse::kReadFile, "f").value(), data);
  EXPECT_EQ(ConfinePath(root_, data, PathUse::kReadFile, "f").value(), data);
  EXPECT_EQ(ConfinePath(root_, "sub/../sub/data.csv", PathUse::kReadFile, "f").value(), data);
  EXPECT_EQ(ConfinePath(root_, "alias.csv", PathUse::kReadFile, "f").value(), data);
  EXPECT_EQ(ConfinePath(root_.string() + "/", "sub/data.csv", PathUse::kReadFile, "f").value(),
            data);
}

TEST_F(ConfinedPathTest, PathsLeadingOutAreRefusedNamingFieldPathAndRoot) {
  for (const std::string path :
       {(base_ / "secret").string(), std::string("../secret"), std::string("sub/../../secret"),
        std::string("leak"), std::string("up/secret"), std::string("/etc/passwd")}) {
    EXPECT_THAT(
        ConfinePath(root_, path, PathUse::kReadFile, "data.train_iter.data_csv"),
        StatusIs(absl::StatusCode::kPermissionDenied,
                 AllOf(HasSubstr("data.train_iter.data_csv: '" + path + "'"),
                       HasSubstr("outside this worker's data root"), HasSubstr(root_.string()))))
        << path;
  }
  // A sibling whose name starts like the root is not inside it.
  fs::create_directories(base_ / "root2");
  std::ofstream(base_ / "root2" / "x") << "x";
  EXPECT_THAT(ConfinePath(root_, (base_ / "root2" / "x").string(), PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(ConfinedPathTest, ReadsNeedARegularFile) {
  EXPECT_THAT(ConfinePath(root_, "fifo", PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not a regular file")));
  EXPECT_THAT(ConfinePath(root_, "sub", PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not a regular file")));
  EXPECT_THAT(ConfinePath("/", "/dev/zero", PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not a regular file")));
  EXPECT_THAT(ConfinePath(root_, "missing.csv", PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'missing.csv'")));
  EXPECT_THAT(ConfinePath(root_, "", PathUse::kReadFile, "f"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ConfinedPathTest, WritePrefixesNeedTheirFolderInsideTheRoot) {
  EXPECT_EQ(ConfinePath(root_, "sub/ckpt", PathUse::kWritePrefix, "checkpoint_prefix").value(),
            (root_ / "sub" / "ckpt").string());
  EXPECT_EQ(ConfinePath(root_, (root_ / "new").string(), PathUse::kWritePrefix, "c").value(),
            (root_ / "new").string());
  for (const std::string& path : {(base_ / "ckpt").string(), std::string("../ckpt"),
                                 std::string("up/ckpt"), std::string("/tmp/ckpt")}) {
    EXPECT_THAT(
        ConfinePath(root_, path, PathUse::kWritePrefix, "checkpoint_prefix"),
        StatusIs(absl::StatusCode::kPermissionDenied,
                 AllOf(HasSubstr("checkpoint_prefix: '" + path + "'"), HasSubstr("run root"))))
        << path;
  }
  EXPECT_THAT(ConfinePath(root_, "sub/..", PathUse::kWritePrefix, "c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no file")));
}

TEST_F(ConfinedPathTest, WritePrefixesMakeTheirMissingFoldersInsideTheRootOnly) {
  // What a remote client names: the folder of its own run, which the worker has not got.
  EXPECT_EQ(ConfinePath(root_, "runs/job/job", PathUse::kWritePrefix, "c").value(),
            (root_ / "runs" / "job" / "job").string());
  EXPECT_TRUE(fs::is_directory(root_ / "runs" / "job"));
  EXPECT_EQ(ConfinePath(root_, "runs/job/job", PathUse::kWritePrefix, "c").value(),
            (root_ / "runs" / "job" / "job").string());

  // Nothing is made outside: through a link that leads out, or with '..' after a missing
  // folder (checked before anything is made).
  EXPECT_THAT(ConfinePath(root_, "up/new/ckpt", PathUse::kWritePrefix, "c"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("run root")));
  EXPECT_FALSE(fs::exists(base_ / "new"));
  EXPECT_THAT(
      ConfinePath(root_, "made/../../escaped/ckpt", PathUse::kWritePrefix, "c"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'..' after a missing folder")));
  EXPECT_FALSE(fs::exists(root_ / "made"));
  EXPECT_FALSE(fs::exists(base_ / "escaped"));

  // A file where a folder should be.
  EXPECT_THAT(ConfinePath(root_, "sub/data.csv/x/ckpt", PathUse::kWritePrefix, "c"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot make")));
}

}  // namespace
}  // namespace tessera
