#include "kvstore/server_node.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore {

int BackupOf(int index, int host, int num_servers) {
  return index != host ? index : (index + 1) % num_servers;
}

ServerNode::ServerNode(const Runtime& rt, ServerStoreOptions options,
                       std::unique_ptr<ReplicaLink> backup, LinkFactory links)
    : rt_(rt),
      options_(options),
      links_(std::move(links)),
      own_(std::make_shared<ServerStore>(rt, std::move(options), std::move(backup))) {}

absl::StatusOr<std::shared_ptr<ServerStore>> ServerNode::StoreFor(const Hello& hello) {
  const int own = options_.server_index;
  const int index = hello.has_serve_index() ? hello.serve_index() : own;
  std::vector<std::shared_ptr<ServerStore>> finished;  // destroyed after the lock is let go
  MutexLock lock(&mu_);
  for (auto it = serving_.begin(); it != serving_.end();) {
    if (it->first.first != hello.job_id() && it->second->connected_workers() == 0) {
      spdlog::info("server {}: lets go of server {}'s keys of job '{}' (taken over in view {}): "
                   "another job came and none of its workers is connected",
                   own, it->first.second, it->first.first, it->second->options().view);
      if (newest_ == it->second.get()) newest_ = nullptr;
      finished.push_back(std::move(it->second));
      it = serving_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(asked_, [&](const auto& entry) { return std::get<0>(entry.first) != hello.job_id(); });
  if (hello.rejoin()) {
    // A lost worker's replacement looks for where the index is served now, in whatever view
    // (the store refuses it unless it runs the job): never a vote for a takeover.
    if (auto it = serving_.find({hello.job_id(), index}); it != serving_.end()) return it->second;
    if (index == own) return own_;
    return absl::NotFoundError(absl::StrCat("server ", own, " does not serve server ", index,
                                            "'s keys for job '", hello.job_id(), "'"));
  }
  if (index == own && hello.view() == 0) return own_;
  if (auto it = serving_.find({hello.job_id(), index}); it != serving_.end()) {
    const std::shared_ptr<ServerStore>& store = it->second;
    if (hello.view() != store->options().view) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", hello.rank(), " asks for server ", index, "'s keys in view ", hello.view(),
          ", but server ", own, " took them over in view ", store->options().view));
    }
    return store;
  }
  if (!own_->MayBackUp(index)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", own, " holds no copy of server ", index,
        "'s keys (it holds its left neighbour's and its own), so it cannot take them over"));
  }
  if (hello.rank() < 0 || hello.rank() >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", hello.rank(), " is outside [0, ", options_.num_workers, ")"));
  }
  std::set<int>& asked = asked_[{hello.job_id(), hello.view(), index}];
  asked.insert(hello.rank());
  const int count = static_cast<int>(asked.size());
  if (2 * count <= options_.num_workers) {
    return absl::UnavailableError(absl::StrCat(
        "server ", own, " takes server ", index, "'s keys over in view ", hello.view(),
        " once a majority of the ", options_.num_workers, " workers ask: ", count, " did"));
  }
  ASSIGN_OR_RETURN(ReplicaStore::Handover handover,
                   own_->HandOverBackup(hello.job_id(), hello.view(), index));
  ServerStoreOptions taker = options_;
  taker.server_index = index;
  taker.host_index = own;
  const int backup = BackupOf(index, own, options_.num_servers);
  std::unique_ptr<ReplicaLink> link =
      links_ != nullptr && backup != own ? links_(backup) : nullptr;
  ASSIGN_OR_RETURN(std::shared_ptr<ServerStore> store,
                   ServerStore::TakeOver(rt_, std::move(taker), std::move(handover),
                                         std::move(link)));
  spdlog::warn("server {}: {} of {} workers lost server {}; serving its keys from here on (view "
               "{}){}",
               own, count, options_.num_workers, index, hello.view(),
               links_ != nullptr ? absl::StrCat(", their copy to go to server ", backup) : "");
  newest_ = store.get();
  serving_[{hello.job_id(), index}] = store;
  std::erase_if(asked_, [&](const auto& entry) { return std::get<2>(entry.first) == index; });
  return store;
}

absl::StatusOr<std::shared_ptr<ServerStore>> ServerNode::StoreFor(const CommandRequest& request) {
  if (!request.has_serve_index() || request.serve_index() == options_.server_index) {
    MutexLock lock(&mu_);
    auto it = serving_.find({request.job_id(), options_.server_index});
    return it != serving_.end() ? it->second : own_;
  }
  MutexLock lock(&mu_);
  auto it = serving_.find({request.job_id(), request.serve_index()});
  if (it == serving_.end()) {
    return absl::NotFoundError(absl::StrCat("server ", options_.server_index,
                                            " does not serve server ", request.serve_index(),
                                            "'s keys for job '", request.job_id(), "'"));
  }
  return it->second;
}

const ServerStore* ServerNode::taken_over(int index) const {
  MutexLock lock(&mu_);
  if (index < 0) return newest_;
  const ServerStore* found = newest_ != nullptr && newest_->options().server_index == index
                                 ? newest_
                                 : nullptr;
  for (const auto& [job_index, store] : serving_) {
    if (found == nullptr && job_index.second == index) found = store.get();
  }
  return found;
}

}  // namespace tessera::kvstore
