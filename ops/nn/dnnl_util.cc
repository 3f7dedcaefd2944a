#include "ops/nn/dnnl_util.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "engine/omp_threads.h"
#include "ndarray/math.h"

namespace tessera::ops::nn {

absl::Status DnnlError(const dnnl::error& e, const char* call, const char* file, int line) {
  const std::string message = absl::StrCat("oneDNN error ", static_cast<int>(e.status), " (",
                                           e.what(), ") in '", call, "' at ", file, ":", line);
  switch (e.status) {
    case dnnl_invalid_arguments:
      return absl::InvalidArgumentError(message);
    case dnnl_unimplemented:
      return absl::UnimplementedError(message);
    case dnnl_out_of_memory:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status ExceptionError(const std::exception& e, const char* call, const char* file, int line) {
  return absl::InternalError(
      absl::StrCat("exception (", e.what(), ") in '", call, "' at ", file, ":", line));
}

absl::Status DnnlEnv::Init() {
  if (engine_.has_value()) return absl::OkStatus();
  DNNL_RETURN_IF_ERROR(engine_.emplace(dnnl::engine::kind::cpu, 0));
  DNNL_RETURN_IF_ERROR(stream_.emplace(*engine_));
  return absl::OkStatus();
}

dnnl::memory::dims Dims(const Shape& shape) { return {shape.begin(), shape.end()}; }

dnnl::memory::desc PlainDesc(const dnnl::memory::dims& dims) {
  using tag = dnnl::memory::format_tag;
  static constexpr tag kTags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, kTags[dims.size() - 1]);
}

dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

absl::StatusOr<bool> InferKernelType(const OperatorProperty& prop, bool half_types,
                                     std::vector<DType>* in_type, std::vector<DType>* out_type,
                                     std::vector<DType>* aux_type) {
  ASSIGN_OR_RETURN(bool known, prop.OperatorProperty::InferType(in_type, out_type, aux_type));
  if (!known) return false;
  const DType type = (*in_type)[0];
  const bool half = type == DType::kFloat16 || type == DType::kBFloat16;
  if (type != DType::kFloat32 && !(half_types && half)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prop.TypeString(), ": ", DTypeName(type), " for argument '", prop.ListArguments()[0],
        "' has no CPU kernel (oneDNN kernels run ",
        half_types ? "float32, float16 and bfloat16" : "float32 only", ")"));
  }
  return true;
}

int CallBuffers::Output(const TBlob& blob, OpReqType req) {
  Slot slot;
  if (req == OpReqType::kWriteTo || req == OpReqType::kWriteInplace) {
    slot.ptr = blob.dptr;
  } else {
    slot.in_scratch = true;
    slot.bytes = blob.Bytes();
    if (req == OpReqType::kAddTo) slot.add_to = static_cast<float*>(blob.dptr);
  }
  slots_.push_back(slot);
  if (slot.in_scratch) {
    slots_.back().offset = total_;
    total_ += (slot.bytes + 63) / 64 * 64;
  }
  return static_cast<int>(slots_.size()) - 1;
}

int CallBuffers::Scratch(size_t bytes) {
  Slot slot;
  slot.in_scratch = bytes > 0;
  slot.bytes = bytes;
  slot.offset = total_;
  total_ += (bytes + 63) / 64 * 64;
  slots_.push_back(slot);
  return static_cast<int>(slots_.size()) - 1;
}

absl::Status CallBuffers::Allocate(const OpContext& ctx) {
  if (total_ == 0) return absl::OkStatus();
  const Resource* temp = nullptr;
  for (const Resource& r : ctx.requested) {
    if (r.type == ResourceRequest::kTempSpace) {
      temp = &r;
      break;
    }
  }
  if (temp == nullptr) {
    return absl::FailedPreconditionError(
        "oneDNN operator called without the kTempSpace resource it declares");
  }
  ASSIGN_OR_RETURN(void* base, temp->get_space(total_));
  for (Slot& slot : slots_) {
    if (slot.in_scratch) slot.ptr = static_cast<char*>(base) + slot.offset;
  }
  return absl::OkStatus();
}

void CallBuffers::Finish() const {
  for (const Slot& slot : slots_) {
    if (slot.add_to == nullptr) continue;
    const float* src = static_cast<const float*>(slot.ptr);
    const int64_t n = static_cast<int64_t>(slot.bytes / sizeof(float));
    for (int64_t i = 0; i < n; ++i) slot.add_to[i] += src[i];
  }
}

void AddScratchpad(const CallBuffers& buffers, int slot, const dnnl::memory::desc& md,
                   const dnnl::engine& eng, std::unordered_map<int, dnnl::memory>* args) {
  if (slot < 0 || md.get_size() == 0) return;
  args->insert({DNNL_ARG_SCRATCHPAD, buffers.Memory(slot, md, eng)});
}

absl::Status DnnlOperator::RunSrcToDst(const OpContext& ctx, const dnnl::primitive& prim,
                                       const dnnl::memory::desc& scratchpad,
                                       const dnnl::memory::desc& md, const TBlob& in,
                                       const TBlob& out, OpReqType req, float src_scale) {
  CallBuffers buf;
  const int dst = buf.Output(out, req);
  const int scaled = src_scale != 1 ? buf.Scratch(in.Size() * sizeof(float)) : -1;
  const int sp = buf.Scratch(scratchpad.get_size());
  RETURN_IF_ERROR(buf.Allocate(ctx));
  dnnl::memory src = BlobMemory(in, md, engine());
  if (scaled >= 0) {
    const float* x = static_cast<const float*>(in.dptr);
    float* xs = buf.fptr(scaled);
    for (int64_t i = 0, n = in.Size(); i < n; ++i) xs[i] = x[i] * src_scale;
    src = buf.Memory(scaled, md, engine());
  }
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src},
                                                {DNNL_ARG_DST, buf.Memory(dst, md, engine())}};
  AddScratchpad(buf, sp, scratchpad, engine(), &args);
  DNNL_RETURN_IF_ERROR(prim.execute(stream(), args));
  DNNL_RETURN_IF_ERROR(stream().wait());
  buf.Finish();
  return absl::OkStatus();
}

absl::Status DnnlOperator::RunDstBackward(const OpContext& ctx, const dnnl::primitive& prim,
                                          const dnnl::memory::desc& scratchpad,
                                          const dnnl::memory::desc& md, const TBlob& out_data,
                                          const TBlob& out_grad, const TBlob& in_grad,
                                          OpReqType req, float diff_src_scale) {
  CallBuffers buf;
  const int dsrc = buf.Output(in_grad, req);
  const int sp = buf.Scratch(scratchpad.get_size());
  RETURN_IF_ERROR(buf.Allocate(ctx));
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_DST, BlobMemory(out_data, md, engine())},
      {DNNL_ARG_DIFF_DST, BlobMemory(out_grad, md, engine())},
      {DNNL_ARG_DIFF_SRC, buf.Memory(dsrc, md, engine())}};
  AddScratchpad(buf, sp, scratchpad, engine(), &args);
  DNNL_RETURN_IF_ERROR(prim.execute(stream(), args));
  DNNL_RETURN_IF_ERROR(stream().wait());
  if (diff_src_scale != 1) {
    // The slot holds only this call's gradient (kAddTo stages it), so scaling it is safe.
    float* g = buf.fptr(dsrc);
    for (int64_t i = 0, n = in_grad.Size(); i < n; ++i) g[i] *= diff_src_scale;
  }
  buf.Finish();
  return absl::OkStatus();
}

absl::Status DnnlOperator::Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                                   const std::vector<OpReqType>& req,
                                   const std::vector<TBlob>& out_data,
                                   const std::vector<TBlob>& aux_states) {
  RETURN_IF_ERROR(env_.Init());
  absl::Status status;
  DType half = HalfType(in_data);
  if (half == DType::kUnknown) half = HalfType(out_data);
  if (half == DType::kUnknown || RunsNatively(half, req)) {
    DNNL_RETURN_IF_ERROR(status = ForwardImpl(ctx, in_data, req, out_data, aux_states));
    return status;
  }
  staging_.Begin();
  const std::vector<TBlob> in = StageInputs(in_data);
  const std::vector<TBlob> out = StageOutputs(out_data, req);
  DNNL_RETURN_IF_ERROR(status = ForwardImpl(ctx, in, req, out, aux_states));
  RETURN_IF_ERROR(status);
  return staging_.Finish();
}

absl::Status DnnlOperator::Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                                    const std::vector<TBlob>& in_data,
                                    const std::vector<TBlob>& out_data,
                                    const std::vector<OpReqType>& req,
                                    const std::vector<TBlob>& in_grad,
                                    const std::vector<TBlob>& aux_states) {
  RETURN_IF_ERROR(env_.Init());
  absl::Status status;
  DType half = HalfType(in_data);
  if (half == DType::kUnknown) half = HalfType(out_grad);
  if (half == DType::kUnknown) half = HalfType(in_grad);
  if (half == DType::kUnknown || RunsNatively(half, req)) {
    DNNL_RETURN_IF_ERROR(
        status = BackwardImpl(ctx, out_grad, in_data, out_data, req, in_grad, aux_states));
    return status;
  }
  staging_.Begin();
  const std::vector<TBlob> og = StageInputs(out_grad), in = StageInputs(in_data),
                           out = StageInputs(out_data);
  const std::vector<TBlob> ig = StageOutputs(in_grad, req);
  DNNL_RETURN_IF_ERROR(status = BackwardImpl(ctx, og, in, out, req, ig, aux_states));
  RETURN_IF_ERROR(status);
  return staging_.Finish();
}

DType DnnlOperator::HalfType(const std::vector<TBlob>& blobs) {
  for (const TBlob& b : blobs) {
    if (b.dtype == DType::kFloat16 || b.dtype == DType::kBFloat16) return b.dtype;
  }
  return DType::kUnknown;
}

bool NativeBFloat16Products() {
  static const bool native = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return native;
}

bool NativeBFloat16Call(DType type, const std::vector<OpReqType>& req) {
  return type == DType::kBFloat16 && NativeBFloat16Products() &&
         std::none_of(req.begin(), req.end(), [](OpReqType r) { return r == OpReqType::kAddTo; });
}

std::vector<TBlob> DnnlOperator::StageInputs(const std::vector<TBlob>& blobs) {
  std::vector<TBlob> staged;
  staged.reserve(blobs.size());
  for (const TBlob& b : blobs) staged.push_back(staging_.Input(b));
  return staged;
}

std::vector<TBlob> DnnlOperator::StageOutputs(const std::vector<TBlob>& blobs,
                                              const std::vector<OpReqType>& req) {
  std::vector<TBlob> staged;
  staged.reserve(blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) staged.push_back(staging_.Output(blobs[i], req[i]));
  return staged;
}

void DnnlOperator::Float32Staging::Begin() {
  used_ = 0;
  outputs_.clear();
}

float* DnnlOperator::Float32Staging::Buffer(size_t elements) {
  if (used_ == buffers_.size()) buffers_.emplace_back();
  std::vector<float>& buffer = buffers_[used_++];
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

TBlob DnnlOperator::Float32Staging::Input(const TBlob& blob) {
  if (blob.dtype == DType::kFloat32 || blob.dptr == nullptr) return blob;
  const TBlob staged(Buffer(blob.Size()), blob.shape, DType::kFloat32, blob.ctx);
  // Between float types of one shape a conversion cannot fail.
  TESSERA_CHECK(math::Cast(blob, staged).ok());
  return staged;
}

TBlob DnnlOperator::Float32Staging::Output(const TBlob& blob, OpReqType req) {
  if (blob.dtype == DType::kFloat32 || blob.dptr == nullptr) return blob;
  const TBlob staged(Buffer(blob.Size()), blob.shape, DType::kFloat32, blob.ctx);
  if (req == OpReqType::kAddTo) TESSERA_CHECK(math::Cast(blob, staged).ok());
  if (req != OpReqType::kNullOp) outputs_.emplace_back(staged, blob);
  return staged;
}

absl::Status DnnlOperator::Float32Staging::Finish() {
  for (const auto& [staged, blob] : outputs_) RETURN_IF_ERROR(math::Cast(staged, blob));
  outputs_.clear();
  return absl::OkStatus();
}

absl::Status CheckCpu(const OperatorProperty& prop, Context ctx) {
  if (ctx.type == DeviceType::kCPU || ctx.type == DeviceType::kCPUPinned) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(prop.TypeString(), ": no kernel for ", ctx.ToString(), " (oneDNN CPU only)"));
}

int MemoryBoundThreads(const OpContext& ctx, int64_t elements) {
  return engine::ThreadsForBytes(3.0 * sizeof(float) * static_cast<double>(elements),
                                 ctx.run_ctx.cpu_threads);
}

bool AllNull(const std::vector<OpReqType>& req) {
  return std::all_of(req.begin(), req.end(), [](OpReqType r) { return r == OpReqType::kNullOp; });
}

void StoreFloats(const float* src, float* out, int64_t n, OpReqType req) {
  switch (req) {
    case OpReqType::kNullOp:
      return;
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      if (src != out) std::memmove(out, src, n * sizeof(float));
      return;
    case OpReqType::kAddTo:
      for (int64_t i = 0; i < n; ++i) out[i] += src[i];
      return;
  }
}

}  // namespace tessera::ops::nn
