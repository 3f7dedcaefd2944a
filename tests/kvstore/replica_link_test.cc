// GrpcReplicaLink against a real backup: a ParameterServer on a Unix socket, its Replicate
// stream, and what the link does when the backup refuses an update, starts late or goes away.
#include "server/replica_link.h"

#include <stdlib.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"

namespace tessera::server {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// What a Done reports, awaited by the test.
class Acks {
 public:
  kvstore::ReplicaLink::Done Next() {
    return [this](const absl::Status& status) {
      std::lock_guard<std::mutex> lock(mu_);
      statuses_.push_back(status);
      cv_.notify_all();
    };
  }
  // The first `n` statuses, once they came (up to 60 s).
  std::vector<absl::Status> Await(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return statuses_.size() >= n; }))
        << statuses_.size() << " of " << n << " acknowledgements";
    return statuses_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<absl::Status> statuses_;
};

class ReplicaLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/replica-link-test-XXXXXX";  // short: a socket path has 107 bytes
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    address_ = absl::StrCat("unix:", dir_, "/backup.sock");
  }
  void TearDown() override {
    link_.reset();
    backup_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Server 1 of 2: the backup of server 0, served with `security`.
  void StartBackup(const rpc::TransportSecurity& security = {}) {
    kvstore::ServerStoreOptions options;
    options.server_index = 1;
    options.num_servers = 2;
    options.num_workers = 2;
    absl::StatusOr<std::unique_ptr<ParameterServer>> ps =
        ParameterServer::Start(address_, options, security);
    ASSERT_THAT(ps.status(), IsOk());
    backup_ = *std::move(ps);
  }
  void StartLink(const rpc::TransportSecurity& security = {}) {
    link_ = std::make_unique<GrpcReplicaLink>(GrpcReplicaLink::Options{
        .target = address_, .security = security, .max_chunk_bytes = 64});
  }
  // Version `version` of key 4 (300 floats): its Init's value or an update, both `fill`.
  static ReplicaMessage Update(uint64_t version, float fill) {
    ReplicaMessage m;
    m.set_job_id("job");
    m.set_primary(0);
    m.set_mode(SYNC_MODE_SYNC);
    m.set_num_workers(2);
    m.set_version(version);
    const std::vector<float> value(300, fill);
    m.mutable_value()->set_key(4);
    m.mutable_value()->set_dtype(DT_FLOAT32);
    m.mutable_value()->add_shape(300);
    m.mutable_value()->set_data(value.data(), value.size() * sizeof(float));
    m.add_taken(version);
    m.add_taken(version);
    return m;
  }
  // The update's value lent as the store lends it.
  void Send(ReplicaMessage update, kvstore::ReplicaLink::Done done) {
    auto bytes = std::make_shared<const std::string>(update.value().data());
    update.mutable_value()->clear_data();
    const std::string_view view = *bytes;
    link_->Send(std::move(update), {std::move(bytes), view}, std::move(done));
  }
  std::vector<float> Copy() {
    absl::StatusOr<kvstore::ReplicaStore::Copy> copy = backup_->store().BackupCopy(4);
    EXPECT_THAT(copy.status(), IsOk());
    std::vector<float> v(copy.ok() ? copy->value.size() / sizeof(float) : 0);
    if (copy.ok()) std::memcpy(v.data(), copy->value.data(), copy->value.size());
    return v;
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<ParameterServer> backup_;
  std::unique_ptr<GrpcReplicaLink> link_;
  Acks acks_;
};

TEST_F(ReplicaLinkTest, UpdatesReachTheBackupInOrderAndEachIsAcknowledged) {
  StartBackup();
  StartLink();
  for (uint64_t v = 0; v <= 3; ++v) Send(Update(v, static_cast<float>(v) + 0.5f), acks_.Next());
  for (const absl::Status& s : acks_.Await(4)) EXPECT_THAT(s, IsOk());
  EXPECT_EQ(Copy(), std::vector<float>(300, 3.5f));  // no optimizer: the update is the value
  EXPECT_EQ(backup_->store().BackupCopy(4)->version, 3u);
}

TEST_F(ReplicaLinkTest, ARefusedUpdateFailsAloneAndNamesWhy) {
  StartBackup();
  StartLink();
  Send(Update(0, 1.f), acks_.Next());
  Send(Update(2, 2.f), acks_.Next());  // version 1 never came
  Send(Update(1, 3.f), acks_.Next());
  const std::vector<absl::Status> statuses = acks_.Await(3);
  EXPECT_THAT(statuses[0], IsOk());
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    AllOf(HasSubstr(address_), HasSubstr("version 1 was lost"))));
  EXPECT_THAT(statuses[2], IsOk());
  EXPECT_EQ(Copy(), std::vector<float>(300, 3.f));
}

// The Replicate stream is a call like any other: without the cluster's token the backup
// refuses it, and the updates fail saying so.
TEST_F(ReplicaLinkTest, AnotherClustersTokenIsRefusedAndSaysWhy) {
  StartBackup({.token = "the-clusters-token"});
  StartLink({.token = "another-token"});
  Send(Update(0, 1.f), acks_.Next());
  EXPECT_THAT(acks_.Await(1)[0], StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr(address_)));
  EXPECT_THAT(backup_->store().BackupCopy(4).status(), StatusIs(absl::StatusCode::kNotFound));
  // With the cluster's token, the same backup takes it.
  link_.reset();
  StartLink({.token = "the-clusters-token"});
  Send(Update(0, 1.f), acks_.Next());
  EXPECT_THAT(acks_.Await(2)[1], IsOk());
}

TEST_F(ReplicaLinkTest, ABackupThatStartsLaterIsWaitedFor) {
  StartLink();
  Send(Update(0, 1.f), acks_.Next());  // nothing listens yet
  StartBackup();
  EXPECT_THAT(acks_.Await(1)[0], IsOk());
  EXPECT_EQ(Copy(), std::vector<float>(300, 1.f));
}

TEST_F(ReplicaLinkTest, ABackupThatWentAwayFailsTheUpdatesAfterIt) {
  StartBackup();
  StartLink();
  Send(Update(0, 1.f), acks_.Next());
  ASSERT_THAT(acks_.Await(1)[0], IsOk());
  backup_->Shutdown();
  backup_.reset();
  Send(Update(1, 2.f), acks_.Next());
  Send(Update(2, 3.f), acks_.Next());
  const std::vector<absl::Status> statuses = acks_.Await(3);
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kUnavailable, HasSubstr(address_)));
  EXPECT_THAT(statuses[2], StatusIs(absl::StatusCode::kUnavailable, HasSubstr(address_)));
}

TEST_F(ReplicaLinkTest, DestroyingTheLinkDoesNotWaitForAnAbsentBackup) {
  StartLink();
  Send(Update(0, 1.f), acks_.Next());  // waits up to 30 s for a backup to come
  link_.reset();  // cancels that wait (within a second)
}

}  // namespace
}  // namespace tessera::server
