// Helpers shared by the oneDNN-backed CPU operators of ops/nn: the error macro that turns
// a thrown dnnl::error into an absl::Status, the per-operator engine and stream, plain
// memory descriptors for row-major TBlobs, CallBuffers, which lays out one call's scratch
// (oneDNN scratchpads and add-to staging) in the engine's temp space, and PrimitiveCache,
// an operator's primitives per input shape.
//
// Engine and stream: each Operator owns one CPU engine and one in-order stream (DnnlEnv).
// An Operator never runs two calls at once (the engine serializes it through its variable,
// see ops/operator.h), so its stream is never shared between threads, and no process-wide
// oneDNN state is hidden below main(). A CPU engine is cheap to create, so per-operator
// costs nothing measurable, while per-thread streams would tie operators to threads.
//
// Primitives are built with scratchpad_mode::user so that their scratch comes from the
// engine's kTempSpace resource instead of an allocation inside every execute.
//
// Thread safety: DnnlEnv and CallBuffers are thread-compatible (one call at a time).
#ifndef TESSERA_OPS_NN_DNNL_UTIL_H_
#define TESSERA_OPS_NN_DNNL_UTIL_H_

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "core/tblob.h"
#include "dnnl.hpp"
#include "ops/operator.h"

namespace tessera::ops::nn {

// The Status for a oneDNN error thrown by `call` at file:line.
absl::Status DnnlError(const dnnl::error& e, const char* call, const char* file, int line);
// The Status for any other exception escaping a oneDNN call (std::bad_alloc, ...).
absl::Status ExceptionError(const std::exception& e, const char* call, const char* file, int line);

}  // namespace tessera::ops::nn

// DNNL_RETURN_IF_ERROR(statement): runs `statement` (which may call oneDNN and throw) and
// returns a Status naming the statement, file and line from the enclosing function if it
// throws. Nothing thrown by oneDNN passes it, so exceptions never leave an Operator.
#define DNNL_RETURN_IF_ERROR(statement)                                                           \
  do {                                                                                            \
    try {                                                                                         \
      statement;                                                                                  \
    } catch (const ::dnnl::error& tessera_dnnl_e_) {                                              \
      return ::tessera::ops::nn::DnnlError(tessera_dnnl_e_, #statement, __FILE__, __LINE__);      \
    } catch (const ::std::exception& tessera_dnnl_e_) {                                           \
      return ::tessera::ops::nn::ExceptionError(tessera_dnnl_e_, #statement, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)

namespace tessera::ops::nn {

// One CPU engine and stream, created on first use.
class DnnlEnv {
 public:
  absl::Status Init();
  const dnnl::engine& engine() const { return *engine_; }
  dnnl::stream& stream() { return *stream_; }

 private:
  std::optional<dnnl::engine> engine_;
  std::optional<dnnl::stream> stream_;
};

// The oneDNN dims of a shape.
dnnl::memory::dims Dims(const Shape& shape);
// A dense row-major f32 descriptor of `dims` (tags a, ab, abc, abcd, abcde).
dnnl::memory::desc PlainDesc(const dnnl::memory::dims& dims);
inline dnnl::memory::desc PlainDesc(const Shape& shape) { return PlainDesc(Dims(shape)); }
// An attribute with user-managed scratchpad (see the header comment).
dnnl::primitive_attr UserScratchpadAttr();

// The default inference (all one type), then an error naming the operator for a type its
// kernels do not run: float32, and with `half_types` float16 and bfloat16 too (the products
// mixed precision runs in the low type, graph/amp.h; see DnnlOperator for how).
absl::StatusOr<bool> InferKernelType(const OperatorProperty& prop, bool half_types,
                                     std::vector<DType>* in_type, std::vector<DType>* out_type,
                                     std::vector<DType>* aux_type);

// An operator's primitives, one Entry per key (its input shape, or what the primitives
// see of it), built on first use.
template <typename Key, typename Entry>
class PrimitiveCache {
 public:
  // Sets *out to the entry for `key`. On first use `fill(Entry*)` builds a new one; when it
  // fails, its status is returned and nothing is kept, so a later call may try again.
  template <typename Fill>
  absl::Status Get(const Key& key, Entry** out, Fill&& fill) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      auto e = std::make_unique<Entry>();
      RETURN_IF_ERROR(fill(e.get()));
      it = entries_.emplace(key, std::move(e)).first;
    }
    *out = it->second.get();
    return absl::OkStatus();
  }

 private:
  std::map<Key, std::unique_ptr<Entry>> entries_;
};

// The memory of one call. Register what the call needs (Output, Scratch), then Allocate
// once: all scratch lives in one get_space of the first requested kTempSpace resource.
// Outputs with kWriteTo / kWriteInplace are written in place; kAddTo outputs are staged in
// scratch and added by Finish(); kNullOp outputs that a primitive must still write go to
// scratch and are dropped.
class CallBuffers {
 public:
  // Slot for an output blob written per `req`.
  int Output(const TBlob& blob, OpReqType req);
  // Slot for `bytes` of scratch.
  int Scratch(size_t bytes);
  absl::Status Allocate(const OpContext& ctx);
  void* ptr(int slot) const { return slots_[slot].ptr; }
  float* fptr(int slot) const { return static_cast<float*>(slots_[slot].ptr); }
  // A oneDNN memory over slot `slot`.
  dnnl::memory Memory(int slot, const dnnl::memory::desc& md, const dnnl::engine& eng) const {
    return dnnl::memory(md, eng, slots_[slot].ptr);
  }
  // Adds staged add-to results into their blobs.
  void Finish() const;

 private:
  struct Slot {
    size_t offset = 0;
    size_t bytes = 0;
    bool in_scratch = false;
    float* add_to = nullptr;  // the blob to add into, for kAddTo
    void* ptr = nullptr;
  };
  std::vector<Slot> slots_;
  size_t total_ = 0;
};

// A oneDNN memory over a blob's data (const-cast: oneDNN's API takes void* for inputs too).
inline dnnl::memory BlobMemory(const TBlob& blob, const dnnl::memory::desc& md,
                               const dnnl::engine& eng) {
  return dnnl::memory(md, eng, blob.dptr);
}

// Adds the scratchpad of `pd` to `args` through `buffers` slot `slot` (-1: none needed).
void AddScratchpad(const CallBuffers& buffers, int slot, const dnnl::memory::desc& md,
                   const dnnl::engine& eng, std::unordered_map<int, dnnl::memory>* args);

// The base of the oneDNN operators: owns the DnnlEnv and is the exception boundary.
// Forward/Backward run the *Impl functions under DNNL_RETURN_IF_ERROR, so anything a oneDNN
// call throws that the implementation did not already turn into a Status still comes back
// as one, naming the failing operator entry point.
//
// The *Impl functions see float32 blobs, unless the operator runs a call's 16-bit type
// natively (RunsNatively: oneDNN's bfloat16 kernels where the CPU has them). Other float16 /
// bfloat16 blobs (operators whose property allows them, InferKernelType) are staged: inputs
// converted to float32, the float32 kernel run, outputs rounded back to their type - the
// numbers of a tensor-core product (low-precision operands, float32 accumulation, a rounded
// result), on every CPU.
class DnnlOperator : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) final;
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) final;

 protected:
  virtual absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in_data,
                                   const std::vector<OpReqType>& req,
                                   const std::vector<TBlob>& out_data,
                                   const std::vector<TBlob>& aux_states) = 0;
  virtual absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                                    const std::vector<TBlob>& in_data,
                                    const std::vector<TBlob>& out_data,
                                    const std::vector<OpReqType>& req,
                                    const std::vector<TBlob>& in_grad,
                                    const std::vector<TBlob>& aux_states) = 0;
  const dnnl::engine& engine() const { return env_.engine(); }
  dnnl::stream& stream() { return env_.stream(); }

  // Whether a call whose 16-bit blobs are of `type` runs them as they are, with these
  // output requests (its *Impl then sees them); false: they are staged through float32.
  virtual bool RunsNatively(DType type, const std::vector<OpReqType>& req) const { return false; }

  // Runs a primitive mapping src to dst, both laid out as `md` (eltwise, softmax), writing
  // `out` per `req`. `scratchpad` is the primitive descriptor's scratchpad_desc(). With
  // `src_scale` != 1 the primitive reads src * src_scale, staged in temp space (softmax's
  // temperature).
  absl::Status RunSrcToDst(const OpContext& ctx, const dnnl::primitive& prim,
                           const dnnl::memory::desc& scratchpad, const dnnl::memory::desc& md,
                           const TBlob& in, const TBlob& out, OpReqType req,
                           float src_scale = 1);
  // Runs a backward primitive computing diff_src from (dst, diff_dst), all laid out as `md`
  // (the "use dst" eltwise algorithms, softmax), writing `in_grad` per `req`, multiplied by
  // `diff_src_scale` (the chain rule through a src_scale).
  absl::Status RunDstBackward(const OpContext& ctx, const dnnl::primitive& prim,
                              const dnnl::memory::desc& scratchpad, const dnnl::memory::desc& md,
                              const TBlob& out_data, const TBlob& out_grad, const TBlob& in_grad,
                              OpReqType req, float diff_src_scale = 1);

 private:
  // float32 copies of one call's half-precision blobs (see the class comment).
  class Float32Staging {
   public:
    void Begin();  // a new call: every buffer free again
    // `blob` itself when it is float32 or has no data; else a float32 copy of its values.
    TBlob Input(const TBlob& blob);
    // Where the kernel writes output `blob` per `req`: itself when float32, else a float32
    // buffer (holding blob's values for kAddTo) that Finish rounds back into it.
    TBlob Output(const TBlob& blob, OpReqType req);
    absl::Status Finish();

   private:
    float* Buffer(size_t elements);
    std::vector<std::vector<float>> buffers_;  // kept between calls: no allocation per call
    size_t used_ = 0;
    std::vector<std::pair<TBlob, TBlob>> outputs_;  // (staged float32, the blob)
  };
  // The 16-bit type among `blobs`, kUnknown without one.
  static DType HalfType(const std::vector<TBlob>& blobs);
  std::vector<TBlob> StageInputs(const std::vector<TBlob>& blobs);
  std::vector<TBlob> StageOutputs(const std::vector<TBlob>& blobs, const std::vector<OpReqType>& req);

  DnnlEnv env_;
  Float32Staging staging_;
};

// Whether this CPU runs bfloat16 products (convolutions, FullyConnected) natively and fast:
// with AMX. Measured on one core: LeNet's conv2 forward on oneDNN's bfloat16 descriptors
// 1.54 ms against 4.48 in float32, fc1 0.14 ms against sgemm's 0.63; on AVX512-BF16 without
// AMX the convolution took 8.3 ms, so there the products stay staged. ONEDNN_MAX_CPU_ISA
// caps it.
bool NativeBFloat16Products();
// Whether a call of 16-bit `type` with output requests `req` may run natively: bfloat16 on
// such a CPU, and no output added to (CallBuffers adds in float32).
bool NativeBFloat16Call(DType type, const std::vector<OpReqType>& req);

// UNIMPLEMENTED naming the operator and device unless `ctx` is a CPU.
absl::Status CheckCpu(const OperatorProperty& prop, Context ctx);

// The property side every oneDNN operator shares: float32 (RunsHalfTypes: the half types
// too), and one temp-space buffer for
// the primitives' scratch in forward and backward. `Derived` adds the shapes, names,
// dependencies and CreateOperator.
template <typename Derived, typename Param>
class DnnlPropertyBase : public PropertyWithParam<Derived, Param> {
 public:
  absl::StatusOr<bool> InferType(std::vector<DType>* in, std::vector<DType>* out,
                                 std::vector<DType>* aux) const override {
    return InferKernelType(*this, RunsHalfTypes(), in, out, aux);
  }
  // Whether the operator runs on float16 / bfloat16 arrays too (staged, see DnnlOperator).
  virtual bool RunsHalfTypes() const { return false; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    return {ResourceRequest{ResourceRequest::kTempSpace}};
  }
  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return {ResourceRequest{ResourceRequest::kTempSpace}};
  }
};

// The same with the usual CreateOperator: GPU contexts go to ops/cuda, CPU ones get
// `Op(param)`.
template <typename Derived, typename Param, typename Op>
class DnnlProperty : public DnnlPropertyBase<Derived, Param> {
 public:
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    if (absl::Status status = CheckCpu(*this, ctx); !status.ok()) return status;
    return std::unique_ptr<Operator>(new Op(this->param_));
  }
};

// The OpenMP threads for a memory-bound primitive (element-wise, softmax, batch norm) over
// float32 tensors of `elements` each, a pass reading up to two and writing one: up to the
// function's RunContext::cpu_threads, by engine::ThreadsForBytes. oneDNN sizes per-thread
// scratch when it creates a primitive, so operators create and run their primitives under
// this count (engine::ScopedOmpThreads) and key their PrimitiveCache by it.
int MemoryBoundThreads(const OpContext& ctx, int64_t elements);

// True when every req is kNullOp (the call has nothing to do).
bool AllNull(const std::vector<OpReqType>& req);

// Copies or adds `n` floats into `out` per `req` (a loop; for small fix-ups).
void StoreFloats(const float* src, float* out, int64_t n, OpReqType req);

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_DNNL_UTIL_H_
