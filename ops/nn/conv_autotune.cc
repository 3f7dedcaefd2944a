#include "ops/nn/conv_autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

namespace tessera::ops::nn {
namespace {

std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, std::string>& Cache() {
  static auto* cache = new std::map<std::string, std::string>;
  return *cache;
}

}  // namespace

bool ConvAutotuneByTiming() {
  const char* value = std::getenv("TESSERA_CONV_AUTOTUNE");
  return value != nullptr && std::string(value) == "1";
}

std::optional<std::string> CachedConvLayouts(const std::string& key) {
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto it = Cache().find(key);
  if (it == Cache().end()) return std::nullopt;
  return it->second;
}

void CacheConvLayouts(const std::string& key, const std::string& layouts) {
  std::lock_guard<std::mutex> lock(CacheMutex());
  Cache().emplace(key, layouts);  // the first choice stands: every operator of the shape agrees
}

double BestSeconds(const std::function<void()>& run, dnnl::stream& stream, int rounds) {
  run();
  stream.wait();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    stream.wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace tessera::ops::nn
