#include "kvstore/internal/server_route.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/transport.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore::internal {

ServerRoute::ServerRoute(Options options, std::unique_ptr<ServerConnection> first)
    : options_(std::move(options)),
      conn_(std::move(first)),
      server_(options_.server >= 0 ? options_.server : options_.index),
      view_(options_.view),
      barriers_(options_.barriers) {}

void ServerRoute::PassedBarrier() {
  MutexLock lock(&mu_);
  ++barriers_;
}

ServerRoute::~ServerRoute() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    closing_ = true;  // losses from here on are failures, not failovers
    threads.swap(failovers_);
  }
  for (std::thread& t : threads) t.join();
  std::shared_ptr<ServerConnection> conn;
  std::vector<std::shared_ptr<ServerConnection>> lost;
  {
    MutexLock lock(&mu_);
    conn.swap(conn_);
    lost.swap(lost_);
  }
  // Closed here, without mu_: their pending callbacks run now and call Lost.
  conn.reset();
  lost.clear();
}

void ServerRoute::Send(Issue issue, OnReply on_reply) {
  Dispatch(std::make_shared<Request>(Request{std::move(issue), std::move(on_reply)}));
}

void ServerRoute::Dispatch(std::shared_ptr<Request> r) {
  std::shared_ptr<ServerConnection> conn;
  uint64_t generation = 0;
  bool moved = false;
  absl::Status failed;
  {
    MutexLock lock(&mu_);
    failed = failed_;
    if (failed.ok() && failing_over_) {
      waiting_.push_back(std::move(r));
      return;
    }
    conn = conn_;
    generation = generation_;
    moved = view_ > 0;
  }
  // The last use of `this` before a reply: a reply may end the request's engine operation,
  // after which the route's owner may destroy the route (DistKVStore's destructor waits for
  // the operations, not for the threads that end them).
  if (!failed.ok()) return r->on_reply(ErrorReply(0, failed), true);
  ServerConnection* raw = conn.get();  // alive: conn_ or lost_ holds it until the end
  r->issue(*raw, moved, [this, r, generation, raw](const ServerMessage& reply, bool done) {
    const bool lost =
        done && ((reply.code() == static_cast<int>(absl::StatusCode::kUnavailable) &&
                  raw->broken()) ||
                 reply.code() == static_cast<int>(absl::StatusCode::kAborted));
    if (lost) return Lost(r, generation, reply);
    r->on_reply(reply, done);
  });
}

void ServerRoute::Lost(std::shared_ptr<Request> r, uint64_t generation,
                       const ServerMessage& reply) {
  bool resend = false;
  {
    MutexLock lock(&mu_);
    const bool can_fail_over = CanFailOver();
    // Sent before a failover that has happened since: sent again where the index is now.
    resend = can_fail_over && generation != generation_;
    if (!resend && can_fail_over && failed_.ok()) {
      waiting_.push_back(std::move(r));
      StartFailover(absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.message()));
      return;
    }
  }
  // Without the lock, and nothing after (Dispatch says why).
  if (resend) return Dispatch(std::move(r));
  r->on_reply(reply, true);
}

bool ServerRoute::CanFailOver() const {
  return !closing_ && !aborted_ && options_.servers.size() >= 2 &&
         (options_.cancellation == nullptr || !options_.cancellation->cancelled());
}

void ServerRoute::StartFailover(absl::Status why) {
  if (failing_over_) return;
  failing_over_ = true;
  failovers_.emplace_back([this, why = std::move(why)] { FailOver(why); });
}

void ServerRoute::FailOver(absl::Status why) {
  int lost = 0, backup = 0;
  uint64_t view = 0, barriers = 0;
  std::string lost_address;
  {
    MutexLock lock(&mu_);
    lost = server_;
    lost_address = options_.servers[lost];
    // Where the copy is (kvstore/server_node.h, BackupOf): the next server while the index is
    // on its own, else its own server, back after the failover that moved it.
    const int n = static_cast<int>(options_.servers.size());
    backup = lost != options_.index ? options_.index : (lost + 1) % n;
    view = view_ + 1;
    barriers = barriers_;
  }
  Hello hello = options_.hello;
  hello.set_view(view);
  hello.set_barriers(barriers);
  hello.set_serve_index(options_.index);
  hello.clear_rejoin();  // a takeover's Hello, which a replacement's first one is not
  spdlog::warn("worker {}: lost parameter server {} ({}) serving index {}: {}; asking its backup, "
               "server {} ({}), to take the keys over in view {}",
               hello.rank(), lost, lost_address, options_.index, std::string(why.message()), backup,
               options_.servers[backup], view);
  absl::StatusOr<std::unique_ptr<ServerConnection>> conn =
      ServerConnection::Connect(options_.servers[backup], hello, options_.failover_timeout,
                                options_.security, options_.cancellation);
  std::vector<std::shared_ptr<Request>> waiting;
  {
    MutexLock lock(&mu_);
    if (conn.ok()) {
      lost_.push_back(std::move(conn_));
      conn_ = *std::move(conn);
      server_ = backup;
      view_ = view;
      ++generation_;
      spdlog::warn("worker {}: server {} serves index {} in view {}", hello.rank(), backup,
                   options_.index, view);
    } else {
      failed_ = absl::UnavailableError(absl::StrCat(
          "parameter server ", lost, " (", lost_address, ") serving index ", options_.index,
          " was lost (", why.message(), "), and its backup, server ", backup,
          ", did not take its keys over: ", conn.status().message()));
      spdlog::error("worker {}: {}", hello.rank(), std::string(failed_.message()));
    }
    failing_over_ = false;
    waiting.swap(waiting_);
    cv_.SignalAll();
  }
  for (std::shared_ptr<Request>& r : waiting) Dispatch(std::move(r));
}

absl::StatusOr<CommandReply> ServerRoute::Command(CommandRequest request, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<ServerConnection> conn;
    uint64_t generation = 0;
    {
      MutexLock lock(&mu_);
      while (failing_over_) {
        if (!cv_.WaitUntil(&mu_, until)) break;
      }
      if (failing_over_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "a command for server index ", options_.index, " waited ",
            absl::FormatDuration(timeout), " for its failover to end"));
      }
      RETURN_IF_ERROR(failed_);
      request.clear_serve_index();
      if (view_ > 0) request.set_serve_index(options_.index);
      conn = conn_;
      generation = generation_;
    }
    // A broken stream means its server is gone, whatever answers at its address now (a
    // restarted server, which holds none of this job's keys).
    absl::StatusOr<CommandReply> reply =
        conn->broken() ? absl::StatusOr<CommandReply>(absl::UnavailableError(absl::StrCat(
                             "parameter server ", conn->address(), ": its stream ended")))
                       : conn->Command(request, std::max(deadline - absl::Now(), absl::Seconds(1)));
    const bool lost = conn->broken() ||
                      (!reply.ok() && reply.status().code() == absl::StatusCode::kUnavailable);
    if (!lost || attempt > 0) return reply;
    // Lost: fail over (or wait for the failover under way), then send it again there.
    MutexLock lock(&mu_);
    if (!CanFailOver()) return reply;
    if (generation == generation_ && failed_.ok()) StartFailover(reply.status());
  }
}

void ServerRoute::Abort() {
  std::shared_ptr<ServerConnection> conn;
  {
    MutexLock lock(&mu_);
    aborted_ = true;
    conn = conn_;
  }
  conn->Abort();
}

HelloReply ServerRoute::hello() const {
  MutexLock lock(&mu_);
  return conn_->hello();
}

std::string ServerRoute::address() const {
  MutexLock lock(&mu_);
  return conn_->address();
}

bool ServerRoute::moved() const {
  MutexLock lock(&mu_);
  return view_ > 0;
}

}  // namespace tessera::kvstore::internal
