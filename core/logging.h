// Process-wide logging set-up, called once from main() of each binary.
//
// Log levels follow spdlog's standard environment variable, e.g. SPDLOG_LEVEL=debug or
// SPDLOG_LEVEL=info,engine=trace. Library code logs through spdlog's default logger.
#ifndef TESSERA_CORE_LOGGING_H_
#define TESSERA_CORE_LOGGING_H_

namespace tessera {

// Installs the stderr logger and applies SPDLOG_LEVEL. Idempotent and thread-safe.
void InitLogging();

}  // namespace tessera

#endif  // TESSERA_CORE_LOGGING_H_
