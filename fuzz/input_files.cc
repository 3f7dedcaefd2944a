#include "fuzz/input_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace tessera::fuzz {

std::vector<std::string> ListInputFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) return files;
  // Runfiles are symlinks to the sources: follow them.
  for (fs::recursive_directory_iterator
           it(path, fs::directory_options::follow_directory_symlink, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    if (fs::is_regular_file(it->path(), ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::optional<std::string> ReadInputFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return bytes;
}

}  // namespace tessera::fuzz
