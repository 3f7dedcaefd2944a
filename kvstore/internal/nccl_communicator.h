// NcclCommunicator: NCCL over the GPUs of one worker process (ncclCommInitAll, one rank per
// device), the device reduction of the local_allreduce_device store. It owns a stream per
// device for its collectives and orders them against the engine's streams with events, so a
// caller inside an engine function (running on the stream of devices()[0]) gets the usual
// contract: the collective starts after everything that stream waits for, and work the
// engine queues after the function on that stream (or that waits on its event, on any device)
// sees the result. No host synchronization anywhere.
//
// NCCL refuses two ranks on one GPU (checked with NCCL 2.28), so the device list must not
// repeat a device; on a one-GPU machine a communicator has one rank, and the code path is the
// same as for N.
//
// Thread-safe: collectives of one communicator are issued under its mutex, so every rank sees
// them in the same order. Only built with CUDA.
#ifndef TESSERA_KVSTORE_INTERNAL_NCCL_COMMUNICATOR_H_
#define TESSERA_KVSTORE_INTERNAL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/mutex.h"
#include "core/tblob.h"

namespace tessera::kvstore::internal {

class NcclCommunicator {
 public:
  // A communicator over `devices` (GPU ids, distinct, at least one). INVALID_ARGUMENT for a
  // bad list, FAILED_PRECONDITION naming the device when it does not exist, the NCCL or CUDA
  // error otherwise.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const std::vector<int>& devices);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const std::vector<int>& devices() const { return devices_; }

  // One sum over the ranks: recv[i] = send[0][j] + send[1][j] + ... for rank i, per list
  // position j of `send` / `recv` (each list holds one blob per device, in devices() order,
  // same shape and dtype across the devices; send may equal recv). Every pair in one NCCL
  // group. `stream` is the caller's stream on devices()[0] (see the header comment).
  absl::Status AllReduceSum(absl::Span<const std::vector<TBlob>> send,
                            absl::Span<const std::vector<TBlob>> recv, cudaStream_t stream);

 private:
  NcclCommunicator() = default;

  std::vector<int> devices_;
  Mutex mu_;
  std::vector<ncclComm_t> comms_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaStream_t> streams_ ABSL_GUARDED_BY(mu_);  // one per device
  std::vector<cudaEvent_t> done_ ABSL_GUARDED_BY(mu_);      // one per device
  cudaEvent_t ready_ ABSL_GUARDED_BY(mu_) = nullptr;        // on devices_[0]
};

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_NCCL_COMMUNICATOR_H_
