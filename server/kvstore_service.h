// KVStoreServiceImpl: the gRPC face of a ServerNode (kvstore/server_node.h: its own
// ServerStore, and the ones it took over), on gRPC's callback API. Each Session stream becomes
// a ServerStore::Session of the store its Hello asks for, whose replies are queued and
// written one at a time; a Replicate stream (from the primary this server backs up)
// becomes a ServerStore::ReplicaSession, acknowledged alike; Command calls go to
// the ServerStore::Command of the store they name, except `stop`, which calls the daemon's stop function (it shuts the
// gRPC server down from another thread).
//
// Thread safety: gRPC calls in from its own threads; the store serializes what it must.
#ifndef TESSERA_SERVER_KVSTORE_SERVICE_H_
#define TESSERA_SERVER_KVSTORE_SERVICE_H_

#include <functional>

#include "kvstore/server_node.h"
#include "proto/kvstore.grpc.pb.h"

namespace tessera::server {

// Session is a raw method: the reactor decodes WorkerMessages and encodes replies itself
// (kvstore/transport.h), so pulled arrays reach the socket without a protobuf copy.
class KVStoreServiceImpl final
    : public KVStoreService::WithRawCallbackMethod_Session<KVStoreService::WithCallbackMethod_Command<
          KVStoreService::WithCallbackMethod_Replicate<KVStoreService::Service>>> {
 public:
  // `node` (not owned) outlives the service; `on_stop` runs once per stop command and must
  // not block (it wakes whoever shuts the server down).
  KVStoreServiceImpl(kvstore::ServerNode* node, std::function<void()> on_stop)
      : node_(node), on_stop_(std::move(on_stop)) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<ReplicaMessage, ReplicaAck>* Replicate(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Command(grpc::CallbackServerContext* context,
                                    const CommandRequest* request, CommandReply* reply) override;

 private:
  kvstore::ServerNode* const node_;  // not owned
  const std::function<void()> on_stop_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_KVSTORE_SERVICE_H_
