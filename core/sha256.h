// SHA-256 digests in lowercase hex (OpenSSL's): checksums of checkpoint files, token owners.
#ifndef TESSERA_CORE_SHA256_H_
#define TESSERA_CORE_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

// The 64 hex digits of `bytes`' SHA-256.
std::string Sha256Hex(absl::string_view bytes);

}  // namespace tessera

#endif  // TESSERA_CORE_SHA256_H_
