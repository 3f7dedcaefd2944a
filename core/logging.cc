#include "core/logging.h"

#include <mutex>

#include "spdlog/cfg/env.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace tessera {

void InitLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("tessera");
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [%t] %v");
    spdlog::set_default_logger(logger);
    spdlog::cfg::load_env_levels();
  });
}

}  // namespace tessera
