// StreamGraph: replays a fixed sequence of GPU work as a CUDA graph, as MXNet 2's
// MXNET_ENABLE_CUDA_GRAPHS does for a bound executor. The work is a host function that
// enqueues kernels on one stream (an executor's forward or backward pass, every operator in
// order; a fused optimizer update). The first Run executes it directly: cuDNN picks its algorithms and scratch buffers
// grow to their final sizes there. The second captures it into a graph
// (cudaStreamBeginCapture in thread-local mode: nothing else in the process is disturbed) and
// launches the graph; later runs only launch the graph, one driver call instead of one per
// kernel.
//
// A capture that fails (an operator synchronizes, allocates with plain cudaMalloc, or calls
// the host back) disables capturing for good, logged once with the CUDA error, and the work
// runs directly from then on: graphs change speed, never results.
//
// The caller guarantees what a replay assumes: the same device pointers and no per-call host
// state baked into kernel arguments (no random numbers, no learning rates). Without CUDA,
// Run just calls the work. Not thread-safe: one owner, runs serialized (an engine operator).
#ifndef TESSERA_ENGINE_STREAM_GRAPH_H_
#define TESSERA_ENGINE_STREAM_GRAPH_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace tessera::engine {

class StreamGraph {
 public:
  // Whether CUDA graphs are wanted: yes unless the TESSERA_CUDA_GRAPHS environment variable
  // is "0".
  static bool EnabledByEnv();

  explicit StreamGraph(std::string name) : name_(std::move(name)) {}
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Enqueues `work` on `stream` (a cudaStream_t): directly, or through the graph (above).
  // `work` must enqueue on `stream` only and return its status.
  absl::Status Run(void* stream, const std::function<absl::Status()>& work);

  // Whether Run was called at least once.
  bool ran() const { return runs_ > 0; }
  // Whether runs now replay a captured graph.
  bool captured() const { return exec_ != nullptr; }
  // Whether capturing was given up (the reason was logged).
  bool disabled() const { return disabled_; }

 private:
  absl::Status Capture(void* stream, const std::function<absl::Status()>& work);

  std::string name_;
  int runs_ = 0;
  bool disabled_ = false;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_STREAM_GRAPH_H_
