// How the dist KVStores name a big key's slices on the parameter servers.
//
// A key of at least `bigarray_bound` elements is cut into equal slices of at most that many
// elements, a multiple of the server count of them, dealt to the servers in turn (slice j to
// server j % S), so that every server holds the same bytes of it and a round of one slice
// completes, and its value goes back, while the next slices are still arriving (ByteScheduler's
// and BytePS's partitioning). A server knows slice j as key + (j / S) * kSliceKeyStride: the
// first slice on each server keeps the key's own number (as before slicing, when a big key
// had one slice per server), later ones count up in strides, so a worker's own keys must stay
// below the stride. The optimizer's per-key multipliers follow a slice back to its key.
#ifndef TESSERA_KVSTORE_KEY_SLICES_H_
#define TESSERA_KVSTORE_KEY_SLICES_H_

namespace tessera::kvstore {

inline constexpr int kSliceKeyStride = 1 << 20;

// The key a server's key names a slice of (the key itself for a key that is not a slice).
inline constexpr int DeclaredKey(int server_key) { return server_key % kSliceKeyStride; }

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_KEY_SLICES_H_
