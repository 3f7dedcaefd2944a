// A process SIGKILLed while it writes complete checkpoints leaves at most one folder without a
// manifest, and that folder is never loaded: the newest complete checkpoint before it reads
// back whole, and the next write clears the remains away. The writer is this binary again, a
// real process (`--write_checkpoints_to DIR`), writing checkpoints of 16 MiB of parameters
// until it is killed; the test kills it once it sees a checkpoint folder without a manifest.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ndarray/test_util.h"
#include "train/checkpoint.h"

extern char** environ;

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kValues = int64_t{4} << 20;  // 16 MiB of float32

// The checkpoint after `batch` batches: every value of its one array is `batch`.
absl::StatusOr<CheckpointContents> ContentsAt(const Runtime& rt, int64_t batch) {
  CheckpointContents contents;
  ASSIGN_OR_RETURN(NDArray w, FromVector<float>(rt, Shape({kValues}),
                                                std::vector<float>(kValues, static_cast<float>(batch))));
  contents.params["arg:w"] = w;
  contents.optimizer_state = "state after batch " + std::to_string(batch);
  contents.manifest.set_job_name("checkpoint-kill");
  contents.manifest.set_epoch(0);
  contents.manifest.set_batch(batch);
  return contents;
}

// The writer process: checkpoints after batch 1, 2, 3, ... into `dir`, all kept, until killed.
int WriteCheckpointsUntilKilled(const std::string& dir) {
  std::unique_ptr<OwnedRuntime> owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kNaive);
  for (int64_t batch = 1;; ++batch) {
    absl::StatusOr<CheckpointContents> contents = ContentsAt(owned->get(), batch);
    absl::Status written =
        contents.ok() ? WriteCheckpoint(dir, *std::move(contents), /*keep=*/0) : contents.status();
    if (!written.ok()) {
      std::fprintf(stderr, "writer: %s\n", written.ToString().c_str());
      return 1;
    }
  }
}

// Checkpoint folders under `dir` that have no manifest (yet).
std::vector<fs::path> WithoutManifest(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (!fs::exists(it->path() / "MANIFEST", error)) found.push_back(it->path());
  }
  return found;
}

// Starts the writer into `dir` and SIGKILLs it once a checkpoint is complete and the next is
// in progress (a folder without a manifest: its files are written and synced before the
// manifest, so the writer spends most of its time there). Whether a write in progress
// remained at the kill (it may have ended in between): the caller tries again if not.
bool KillMidWrite(const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self, "--write_checkpoints_to", dir.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t writer = 0;
  EXPECT_EQ(posix_spawn(&writer, self.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  if (writer == 0) return false;
  // Bounded only against a writer that stops writing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  bool caught = false;
  while (!caught && std::chrono::steady_clock::now() < deadline &&
         waitpid(writer, nullptr, WNOHANG) == 0) {
    caught = NewestCheckpoint(dir.string()).ok() && !WithoutManifest(dir).empty();
    if (!caught) std::this_thread::yield();
  }
  kill(writer, SIGKILL);
  int status = 0;
  EXPECT_EQ(waitpid(writer, &status, 0), writer);
  EXPECT_TRUE(caught) << "the writer ended, or wrote nothing within 2 minutes";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer status " << status;
  return caught && WithoutManifest(dir).size() == 1;
}

TEST(CheckpointKillTest, AWriterKilledMidCheckpointLeavesNothingThatIsLoaded) {
  const fs::path dir = fs::path(::testing::TempDir()) / "checkpoint-kill";
  bool cut_short = false;
  for (int attempt = 0; attempt < 5 && !cut_short && !HasFailure(); ++attempt) {
    cut_short = KillMidWrite(dir);
  }
  ASSERT_TRUE(cut_short) << "5 kills, none during a write";

  // The write it cut short: one folder, without a manifest, newer than every complete one.
  const std::vector<fs::path> cut = WithoutManifest(dir);
  ASSERT_EQ(cut.size(), 1u);
  absl::StatusOr<std::string> newest = NewestCheckpoint(dir.string());
  ASSERT_THAT(newest, IsOk());
  EXPECT_LT(fs::path(*newest).filename(), cut[0].filename());
  EXPECT_THAT(ReadCheckpoint(tessera::testing::MakeRuntime(tessera::testing::EngineKind::kNaive)->get(),
                             cut[0].string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(cut[0].string())));

  // The newest complete one reads back whole, with the values of its batch.
  std::unique_ptr<OwnedRuntime> owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kNaive);
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(owned->get(), *newest);
  ASSERT_THAT(loaded, IsOk());
  const int64_t batch = loaded->manifest.batch();
  EXPECT_EQ(loaded->optimizer_state, "state after batch " + std::to_string(batch));
  absl::StatusOr<std::vector<float>> values = loaded->arg_params.at("w").AsVector<float>();
  ASSERT_THAT(values, IsOk());
  EXPECT_EQ(*values, std::vector<float>(kValues, static_cast<float>(batch)));

  // The run resumed from it writes its next checkpoint, and the remains of the cut one go.
  absl::StatusOr<CheckpointContents> next = ContentsAt(owned->get(), batch + 1);
  ASSERT_THAT(next, IsOk());
  ASSERT_THAT(WriteCheckpoint(dir.string(), *std::move(next), /*keep=*/0), IsOk());
  EXPECT_THAT(WithoutManifest(dir), ::testing::IsEmpty());
}

}  // namespace
}  // namespace tessera::train

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write_checkpoints_to") == 0) {
    return tessera::train::WriteCheckpointsUntilKilled(argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
