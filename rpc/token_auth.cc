#include "rpc/token_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/sha256.h"

namespace tessera::rpc {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";
constexpr char kHealthService[] = "/grpc.health.v1.Health/";
constexpr char kOwnerProperty[] = "tessera-token-owner";

class TokenPlugin : public grpc::MetadataCredentialsPlugin {
 public:
  explicit TokenPlugin(std::string token) : header_(std::string(kBearer) + std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->emplace(kAuthorization, header_);
    return grpc::Status::OK;
  }
  grpc::string DebugString() override { return "Tessera cluster token"; }

 private:
  const std::string header_;
};

class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::string token) : token_(std::move(token)), owner_(TokenOwner(token_)) {}
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata*) override {
    if (auto path = metadata.find(":path");
        path != metadata.end() &&
        absl::StartsWith(absl::string_view(path->second.data(), path->second.size()),
                         kHealthService)) {
      return grpc::Status::OK;
    }
    auto header = metadata.find(kAuthorization);
    if (header == metadata.end()) {
      return grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          "this call carries no cluster token (--token_file or TESSERA_TOKEN_FILE)");
    }
    const absl::string_view value(header->second.data(), header->second.size());
    const bool bearer = absl::StartsWith(value, kBearer);
    if (!bearer || !TokensEqual(value.substr(bearer ? sizeof(kBearer) - 1 : 0), token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong cluster token");
    }
    // Handlers never see the token, only whose it is.
    consumed->emplace(kAuthorization, std::string(value));
    context->AddProperty(kOwnerProperty, owner_);
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
  const std::string owner_;  // TokenOwner(token_), hashed once rather than on every call
};

}  // namespace

bool TokensEqual(absl::string_view presented, absl::string_view expected) {
  // Digests first, so lengths do not shorten the comparison either.
  unsigned char a[SHA256_DIGEST_LENGTH];
  unsigned char b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(presented.data()), presented.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

std::string TokenOwner(absl::string_view token) {
  if (token.empty()) return "";
  return Sha256Hex(token).substr(0, 16);
}

std::string CallerOwner(const grpc::AuthContext& context) {
  const std::vector<grpc::string_ref> values = context.FindPropertyValues(kOwnerProperty);
  return values.empty() ? "" : std::string(values.front().data(), values.front().size());
}

std::shared_ptr<grpc::CallCredentials> TokenCallCredentials(
    std::string token, grpc_security_level min_security_level) {
  return grpc::experimental::MetadataCredentialsFromPlugin(
      std::make_unique<TokenPlugin>(std::move(token)), min_security_level);
}

std::shared_ptr<grpc::AuthMetadataProcessor> TokenAuthProcessor(std::string token) {
  return std::make_shared<TokenProcessor>(std::move(token));
}

}  // namespace tessera::rpc
