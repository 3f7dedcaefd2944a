// NcclCommunicator (see nccl_communicator.h).
#include "kvstore/internal/nccl_communicator.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"

namespace tessera::kvstore::internal {
namespace {

absl::Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          ncclGetErrorString(result), " (",
                                          static_cast<int>(result), ")"));
}

#define NCCL_RETURN_IF_ERROR(call)                                                    \
  do {                                                                                \
    ::absl::Status tessera_nccl_status_ = NcclStatus((call), #call, __FILE__, __LINE__); \
    if (!tessera_nccl_status_.ok()) return tessera_nccl_status_;                      \
  } while (false)

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL allreduce: unsupported dtype ", DTypeName(dtype)));
  }
}

// Restores the calling thread's current device on scope exit (the engine's worker threads
// keep theirs current).
class DeviceGuard {
 public:
  DeviceGuard() { cudaGetDevice(&device_); }
  ~DeviceGuard() { cudaSetDevice(device_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const std::vector<int>& devices) {
  const std::string list = absl::StrJoin(devices, ",");
  if (devices.empty()) return absl::InvalidArgumentError("NCCL communicator: no devices");
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL communicator over gpus (", list, "): a GPU appears twice (NCCL takes one rank per "
        "GPU)"));
  }
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL communicator over gpus (", list, "): no usable GPU: ", cudaGetErrorString(err)));
  }
  for (int d : devices) {
    if (d < 0 || d >= count) {
      return absl::FailedPreconditionError(absl::StrCat("NCCL communicator: gpu(", d,
                                                        ") does not exist (", count, " GPUs)"));
    }
  }
  DeviceGuard guard;
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator);
  comm->devices_ = devices;
  MutexLock lock(&comm->mu_);
  comm->comms_.resize(devices.size(), nullptr);
  NCCL_RETURN_IF_ERROR(
      ncclCommInitAll(comm->comms_.data(), static_cast<int>(devices.size()), devices.data()));
  for (int d : devices) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    cudaStream_t stream = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm->streams_.push_back(stream);
    cudaEvent_t done = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    comm->done_.push_back(done);
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[0]));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&comm->ready_, cudaEventDisableTiming));
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  MutexLock lock(&mu_);
  DeviceGuard guard;
  // Failures cannot be reported from here; the resources are lost at worst.
  for (ncclComm_t c : comms_) {
    if (c != nullptr) ncclCommDestroy(c);
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    cudaSetDevice(devices_[i]);
    cudaStreamDestroy(streams_[i]);
    cudaEventDestroy(done_[i]);
  }
  if (ready_ != nullptr) {
    cudaSetDevice(devices_[0]);
    cudaEventDestroy(ready_);
  }
}

absl::Status NcclCommunicator::AllReduceSum(absl::Span<const std::vector<TBlob>> send,
                                            absl::Span<const std::vector<TBlob>> recv,
                                            cudaStream_t stream) {
  const size_t n = devices_.size();
  if (send.size() != recv.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL allreduce: ", send.size(),
                                                   " send lists but ", recv.size(), " recv lists"));
  }
  std::vector<ncclDataType_t> types;
  for (size_t j = 0; j < send.size(); ++j) {
    if (send[j].size() != n || recv[j].size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL allreduce: item ", j, " has ",
                                                     send[j].size(), " send and ", recv[j].size(),
                                                     " recv blobs for ", n, " devices"));
    }
    for (size_t i = 0; i < n; ++i) {
      const TBlob& s = send[j][i];
      const TBlob& r = recv[j][i];
      const Context want = Context::GPU(devices_[i]);
      if (s.ctx != want || r.ctx != want || s.Size() != send[j][0].Size() ||
          r.Size() != s.Size() || s.dtype != send[j][0].dtype || r.dtype != s.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NCCL allreduce: item ", j, " rank ", i, ": send ", DTypeName(s.dtype), " ",
            s.shape.ToString(), " on ", s.ctx.ToString(), ", recv ", DTypeName(r.dtype), " ",
            r.shape.ToString(), " on ", r.ctx.ToString(), "; rank ", i, " is ", want.ToString(),
            " and every rank needs ", send[j][0].Size(), " elements of ",
            DTypeName(send[j][0].dtype)));
      }
    }
    ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(send[j][0].dtype));
    types.push_back(type);
  }
  MutexLock lock(&mu_);
  DeviceGuard guard;
  // The collectives start after the caller's stream has reached this point...
  CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[0]));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, stream));
  for (size_t i = 0; i < n; ++i) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[i]));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(streams_[i], ready_, 0));
  }
  NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status issued = absl::OkStatus();
  for (size_t j = 0; j < send.size() && issued.ok(); ++j) {
    for (size_t i = 0; i < n && issued.ok(); ++i) {
      issued = NcclStatus(ncclAllReduce(send[j][i].dptr, recv[j][i].dptr,
                                        static_cast<size_t>(send[j][i].Size()), types[j], ncclSum,
                                        comms_[i], streams_[i]),
                          "ncclAllReduce", __FILE__, __LINE__);
    }
  }
  // A group is always closed, even after a failed call inside it.
  NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  RETURN_IF_ERROR(issued);
  // ...and the caller's stream continues after all of them.
  for (size_t i = 0; i < n; ++i) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[i]));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(done_[i], streams_[i]));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[0]));
  for (size_t i = 0; i < n; ++i) {
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, done_[i], 0));
  }
  return absl::OkStatus();
}

}  // namespace tessera::kvstore::internal
