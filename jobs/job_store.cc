#include "jobs/job_store.h"

#include <cstdint>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::jobs {
namespace {

namespace fs = std::filesystem;

constexpr char kRequest[] = "request.pb";
constexpr char kRecord[] = "record.pb";
constexpr char kEvents[] = "events.log";

template <typename Message>
absl::StatusOr<Message> ReadMessage(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a ", Message::descriptor()->name()));
  }
  return message;
}

// Every whole record of an events.log; a torn last one is dropped with a warning.
std::vector<RankedEvent> ParseEvents(const std::string& path, const std::string& bytes) {
  std::vector<RankedEvent> events;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 4) break;
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) length |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    at += 4;
    if (bytes.size() - at < length) break;
    RankedEvent event;
    if (!event.ParseFromArray(bytes.data() + at, static_cast<int>(length))) break;
    events.push_back(std::move(event));
    at += length;
  }
  if (at < bytes.size()) {
    spdlog::warn("jobs: dropped a torn event at byte {} of '{}' (a crash while it was written)", at,
                 path);
  }
  return events;
}

}  // namespace

absl::StatusOr<JobStore> JobStore::Open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the jobs folder '", dir, "': ", ec.message()));
  return JobStore(dir);
}

std::string JobStore::Folder(const std::string& id) const { return (fs::path(dir_) / id).string(); }

absl::StatusOr<std::vector<StoredJob>> JobStore::LoadAll() const {
  std::vector<StoredJob> jobs;
  if (dir_.empty()) return jobs;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    if (!entry.is_directory()) continue;
    const std::string folder = entry.path().string();
    absl::StatusOr<JobRecord> record = ReadMessage<JobRecord>(folder + "/" + kRecord);
    absl::StatusOr<SubmitJobRequest> request = ReadMessage<SubmitJobRequest>(folder + "/" + kRequest);
    if (!record.ok() || !request.ok()) {
      spdlog::warn("jobs: skipping '{}': {}", folder,
                   (record.ok() ? request.status() : record.status()).ToString());
      continue;
    }
    if (record->id() != entry.path().filename().string()) {
      spdlog::warn("jobs: skipping '{}': its record is of job '{}'", folder, record->id());
      continue;
    }
    StoredJob job{.request = *std::move(request), .record = *std::move(record)};
    const std::string events_path = folder + "/" + kEvents;
    if (absl::StatusOr<std::string> bytes = ReadFileToString(events_path); bytes.ok()) {
      job.events = ParseEvents(events_path, *bytes);
    }
    jobs.push_back(std::move(job));
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list the jobs folder '", dir_, "': ", ec.message()));
  return jobs;
}

absl::Status JobStore::Create(const SubmitJobRequest& request, const JobRecord& record) {
  if (dir_.empty()) return absl::OkStatus();
  const std::string folder = Folder(record.id());
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", folder, "': ", ec.message()));
  // The request first: a folder with a record always has its request.
  RETURN_IF_ERROR(WriteFileAtomically(folder + "/" + kRequest, request.SerializeAsString(), kOwnerOnly));
  return SaveRecord(record);
}

absl::Status JobStore::SaveRecord(const JobRecord& record) {
  if (dir_.empty()) return absl::OkStatus();
  return WriteFileAtomically(Folder(record.id()) + "/" + kRecord, record.SerializeAsString(), kOwnerOnly);
}

absl::Status JobStore::AppendEvent(const std::string& id, const RankedEvent& event) {
  if (dir_.empty()) return absl::OkStatus();
  const std::string bytes = event.SerializeAsString();
  std::string framed(4, '\0');
  for (int i = 0; i < 4; ++i) framed[i] = static_cast<char>((bytes.size() >> (8 * i)) & 0xff);
  framed += bytes;
  return AppendToFile(Folder(id) + "/" + kEvents, framed, kOwnerOnly);
}

absl::Status JobStore::Remove(const std::string& id) {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::remove_all(Folder(id), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove '", Folder(id), "': ", ec.message()));
  return absl::OkStatus();
}

}  // namespace tessera::jobs
