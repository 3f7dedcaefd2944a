#include "kvstore/server_node.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore {

ServerNode::ServerNode(const Runtime& rt, ServerStoreOptions options,
                       std::unique_ptr<ReplicaLink> backup)
    : rt_(rt),
      options_(options),
      own_(std::make_unique<ServerStore>(rt, std::move(options), std::move(backup))) {}

absl::StatusOr<ServerStore*> ServerNode::StoreFor(const Hello& hello) {
  if (!hello.has_serve_index() || hello.serve_index() == options_.server_index) return own_.get();
  const int index = hello.serve_index();
  if (index != primary() || options_.num_servers < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", options_.server_index, " holds no copy of server ", index,
        "'s keys (it backs up server ", primary(), " only), so it cannot take them over"));
  }
  MutexLock lock(&mu_);
  if (!taken_.empty() && taken_job_ == hello.job_id()) {
    ServerStore* store = taken_.back().get();
    if (hello.view() != store->options().view) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", hello.rank(), " asks for server ", index, "'s keys in view ", hello.view(),
          ", but server ", options_.server_index, " took them over in view ",
          store->options().view));
    }
    return store;
  }
  if (hello.rank() < 0 || hello.rank() >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", hello.rank(), " is outside [0, ", options_.num_workers, ")"));
  }
  std::set<int>& asked = asked_[{hello.job_id(), hello.view()}];
  asked.insert(hello.rank());
  const int count = static_cast<int>(asked.size());
  if (2 * count <= options_.num_workers) {
    return absl::UnavailableError(absl::StrCat(
        "server ", options_.server_index, " takes server ", index, "'s keys over in view ",
        hello.view(), " once a majority of the ", options_.num_workers,
        " workers ask: ", count, " did"));
  }
  ASSIGN_OR_RETURN(ReplicaStore::Handover handover,
                   own_->HandOverBackup(hello.job_id(), hello.view()));
  ServerStoreOptions taker = options_;
  taker.server_index = index;
  ASSIGN_OR_RETURN(std::unique_ptr<ServerStore> store,
                   ServerStore::TakeOver(rt_, std::move(taker), std::move(handover)));
  spdlog::warn("server {}: {} of {} workers lost server {}; serving its keys from here on (view "
               "{})",
               options_.server_index, count, options_.num_workers, index, hello.view());
  taken_.push_back(std::move(store));
  taken_job_ = hello.job_id();
  asked_.clear();
  return taken_.back().get();
}

absl::StatusOr<ServerStore*> ServerNode::StoreFor(const CommandRequest& request) {
  if (!request.has_serve_index() || request.serve_index() == options_.server_index) {
    return own_.get();
  }
  MutexLock lock(&mu_);
  if (taken_.empty() || request.serve_index() != primary() || taken_job_ != request.job_id()) {
    return absl::NotFoundError(absl::StrCat("server ", options_.server_index,
                                            " does not serve server ", request.serve_index(),
                                            "'s keys for job '", request.job_id(), "'"));
  }
  return taken_.back().get();
}

const ServerStore* ServerNode::taken_over() const {
  MutexLock lock(&mu_);
  return taken_.empty() ? nullptr : taken_.back().get();
}

}  // namespace tessera::kvstore
