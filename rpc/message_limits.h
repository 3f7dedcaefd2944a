// The largest message each of Tessera's gRPC services sends and receives, one table that
// both ends of every connection read, so a limit never disagrees between them.
#ifndef TESSERA_RPC_MESSAGE_LIMITS_H_
#define TESSERA_RPC_MESSAGE_LIMITS_H_

namespace tessera::rpc {

inline constexpr int kUnlimited = -1;

struct MessageLimits {
  int max_receive = 4 << 20;  // bytes; kUnlimited for none
  int max_send = 4 << 20;

  // What the other end of a connection with these limits must use.
  constexpr MessageLimits Peer() const {
    return {.max_receive = max_send, .max_send = max_receive};
  }
};

// KVStoreService (parameter servers): arrays travel in 1 MiB chunks, so every message of
// either side stays well under 4 MiB, which both sides enforce.
inline constexpr MessageLimits kKVStoreLimits{.max_receive = 4 << 20, .max_send = 4 << 20};

// Worker service, as its server sees it: a JobSpec (a graph and a job's settings) of up to
// 64 MiB in; GetParams answers with the whole model, so nothing bounds what goes out.
inline constexpr MessageLimits kWorkerServiceLimits{.max_receive = 64 << 20,
                                                    .max_send = kUnlimited};

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_MESSAGE_LIMITS_H_
