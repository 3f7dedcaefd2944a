// StreamGraph (see stream_graph.h).
#include "engine/stream_graph.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_status.h"
#endif

namespace tessera::engine {

bool StreamGraph::EnabledByEnv() {
  // On unless turned off: the GPU suite passes either way (README, "Training on the GPU").
  const char* value = std::getenv("TESSERA_CUDA_GRAPHS");
  return value == nullptr || std::string(value) != "0";
}

#if TESSERA_USE_CUDA

StreamGraph::~StreamGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

absl::Status StreamGraph::Run(void* stream, const std::function<absl::Status()>& work) {
  ++runs_;
  if (exec_ != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                         static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }
  // The first run warms up (algorithm choice, scratch growth); the work's own errors are
  // the caller's, not a reason to stop capturing.
  if (disabled_ || runs_ == 1) return work();
  return Capture(stream, work);
}

absl::Status StreamGraph::Capture(void* stream, const std::function<absl::Status()>& work) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto give_up = [&](const std::string& why) {
    disabled_ = true;
    cudaGetLastError();  // a failed capture leaves a sticky launch error behind
    spdlog::warn("{}: CUDA graph capture disabled, running operator by operator: {}", name_, why);
  };
  if (cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      err != cudaSuccess) {
    give_up(absl::StrCat("cudaStreamBeginCapture: ", cudaGetErrorString(err)));
    return work();
  }
  const absl::Status recorded = work();
  cudaGraph_t graph = nullptr;
  // Always end the capture, even after a failure, so the stream is usable again.
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (!recorded.ok() || ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    // Nothing recorded ran: run the work for real, uncaptured, this time and from now on.
    give_up(!recorded.ok() ? std::string(recorded.message())
                           : absl::StrCat("cudaStreamEndCapture: ", cudaGetErrorString(ended)));
    return work();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    give_up(absl::StrCat("cudaGraphInstantiate: ", cudaGetErrorString(made)));
    return work();
  }
  exec_ = exec;
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, s));
  return absl::OkStatus();
}

#else  // !TESSERA_USE_CUDA

StreamGraph::~StreamGraph() = default;

absl::Status StreamGraph::Run(void*, const std::function<absl::Status()>& work) {
  ++runs_;
  return work();
}

absl::Status StreamGraph::Capture(void*, const std::function<absl::Status()>& work) {
  return work();
}

#endif  // TESSERA_USE_CUDA

}  // namespace tessera::engine
