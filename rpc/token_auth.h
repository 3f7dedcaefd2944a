// The cluster token on the wire: clients attach it to every call as
// "authorization: Bearer <token>" (call credentials), servers check it in gRPC's auth
// metadata processor before any handler runs. Missing or wrong is UNAUTHENTICATED; the
// comparison takes the same time wherever the strings differ, and the token is never
// logged or echoed. gRPC health checks need no token (Kubernetes' probes cannot send one,
// and they learn nothing but SERVING).
#ifndef TESSERA_RPC_TOKEN_AUTH_H_
#define TESSERA_RPC_TOKEN_AUTH_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/credentials.h"

namespace tessera::rpc {

// `min_security_level`: GRPC_PRIVACY_AND_INTEGRITY over TLS; GRPC_SECURITY_NONE over
// loopback's local credentials (the token then never leaves the machine).
std::shared_ptr<grpc::CallCredentials> TokenCallCredentials(std::string token,
                                                            grpc_security_level min_security_level);

std::shared_ptr<grpc::AuthMetadataProcessor> TokenAuthProcessor(std::string token);

// Who a token belongs to, as jobs record it (proto/jobs.proto): the first 16 hex digits of its
// SHA-256, so that the token itself is never stored. "" for no token.
std::string TokenOwner(absl::string_view token);

// The owner of a call's token, as the auth metadata processor recorded it in the call's auth
// context; "" on a server that checks no token.
std::string CallerOwner(const grpc::AuthContext& context);

// Whether `presented` equals `expected`, in time independent of where they differ.
bool TokensEqual(absl::string_view presented, absl::string_view expected);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_TOKEN_AUTH_H_
