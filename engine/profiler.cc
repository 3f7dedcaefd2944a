#include "engine/profiler.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::engine {

void Profiler::Start(Mode mode) {
  MutexLock guard(&mu_);
  events_.clear();
  mode_.store(static_cast<int>(mode), std::memory_order_relaxed);
}

void Profiler::Record(const ProfileEvent& event) {
  MutexLock guard(&mu_);
  events_.push_back(event);
}

std::vector<ProfileEvent> Profiler::events() const {
  MutexLock guard(&mu_);
  return events_;
}

int64_t Profiler::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t Profiler::ThisThreadId() {
  static std::atomic<uint64_t> next{1};
  thread_local uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

namespace {

std::string JsonEscape(const char* s) {
  std::string out;
  for (; s != nullptr && *s != '\0'; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

std::string Profiler::ChromeTraceJson() const {
  std::vector<ProfileEvent> events = this->events();
  // One trace "process" per device, named by a metadata event.
  std::map<std::string, int> pids;
  for (const ProfileEvent& e : events) pids.emplace(e.ctx.ToString(), 0);
  int next_pid = 0;
  for (auto& [name, pid] : pids) pid = next_pid++;

  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto append = [&](const std::string& line) {
    if (!first) out += ",\n";
    first = false;
    out += line;
  };
  for (const auto& [name, pid] : pids) {
    append(absl::StrFormat(
        R"({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "%s"}})", pid, name));
  }
  for (const ProfileEvent& e : events) {
    append(absl::StrFormat(
        R"({"name": "%s", "cat": "%s", "ph": "X", "pid": %d, "tid": %d, "ts": %.3f, "dur": %.3f})",
        JsonEscape(e.name != nullptr ? e.name : "(unnamed function)"), FnPropertyName(e.prop),
        pids[e.ctx.ToString()], e.thread_id, e.start_ns / 1e3, (e.end_ns - e.start_ns) / 1e3));
  }
  out += "\n]}\n";
  return out;
}

absl::Status Profiler::WriteChromeTrace(const std::string& path) const {
  std::ofstream file(path, std::ios::trunc);
  if (!file) return absl::UnavailableError(absl::StrCat("cannot open profile file '", path, "'"));
  file << ChromeTraceJson();
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("cannot write profile file '", path, "'"));
  return absl::OkStatus();
}

}  // namespace tessera::engine
