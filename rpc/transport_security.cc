#include "rpc/transport_security.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"

namespace tessera::rpc {
namespace {

// gRPC's threads may still be in a TLS handshake when the process exits (a channel given up
// on keeps connecting in the background), and OpenSSL's atexit clean-up would free what they
// use: a SIGSEGV at exit. This runs before main(), ahead of any other use of OpenSSL, so the
// clean-up is never registered; the kernel frees everything anyway.
[[maybe_unused]] const bool kOpenSslWithoutAtExit =
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

std::string FromEnv(const std::string& flag_value, const char* variable) {
  if (!flag_value.empty()) return flag_value;
  const char* value = std::getenv(variable);
  return value == nullptr ? "" : value;
}

bool EnvFlag(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr && (std::string(value) == "1" || absl::AsciiStrToLower(value) == "true");
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return Annotate(text.status(), "token file");
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  return token;
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    return absl::InternalError("OpenSSL's RAND_bytes failed");
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<TransportSecurity> LoadTransportSecurity(TransportSecuritySources sources) {
  sources.tls_dir = FromEnv(sources.tls_dir, "TESSERA_TLS_DIR");
  sources.token_file = FromEnv(sources.token_file, "TESSERA_TOKEN_FILE");
  sources.mtls = sources.mtls || EnvFlag("TESSERA_MTLS");
  sources.insecure = sources.insecure || EnvFlag("TESSERA_INSECURE");

  TransportSecurity security;
  security.insecure = sources.insecure;
  security.require_client_cert = sources.mtls;
  if (!sources.tls_dir.empty()) {
    const std::filesystem::path dir(sources.tls_dir);
    auto read = [&](const char* name, std::string* out) -> absl::Status {
      absl::StatusOr<std::string> text = ReadFileToString((dir / name).string());
      if (!text.ok()) return Annotate(text.status(), "--tls_dir");
      *out = *std::move(text);
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(read(kCaFile, &security.ca_pem));
    const bool has_cert = std::filesystem::exists(dir / kCertFile);
    const bool has_key = std::filesystem::exists(dir / kKeyFile);
    if (has_cert != has_key) {
      return absl::InvalidArgumentError(absl::StrCat("--tls_dir '", sources.tls_dir, "' holds ",
                                                     has_cert ? kCertFile : kKeyFile, " without ",
                                                     has_cert ? kKeyFile : kCertFile));
    }
    if (has_cert) {
      RETURN_IF_ERROR(read(kCertFile, &security.cert_pem));
      RETURN_IF_ERROR(read(kKeyFile, &security.key_pem));
    }
  }
  if (sources.mtls && !security.tls()) {
    return absl::InvalidArgumentError("--mtls needs --tls_dir (TESSERA_TLS_DIR)");
  }
  if (!sources.token_file.empty()) {
    ASSIGN_OR_RETURN(security.token, ReadTokenFile(sources.token_file));
  }
  return security;
}

}  // namespace tessera::rpc
