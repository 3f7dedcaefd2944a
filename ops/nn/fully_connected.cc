// FullyConnected (MXNet): out = data * weight^T + bias, with data flattened to 2-D
// (flatten=true: (N, rest); false: (all but last, last)). CPU kernel: three oneDNN sgemm
// calls (see FullyConnectedOp).
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/omp_threads.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

struct FullyConnectedParam {
  int num_hidden = 0;
  bool no_bias = false;
  bool flatten = true;
  static const ParamSchema<FullyConnectedParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<FullyConnectedParam>("FullyConnected");
      s->Field("num_hidden", &FullyConnectedParam::num_hidden)
          .Required()
          .Lower(1)
          .Describe("number of hidden units (output features)");
      s->Field("no_bias", &FullyConnectedParam::no_bias).Describe("whether to omit the bias");
      s->Field("flatten", &FullyConnectedParam::flatten)
          .Describe("collapse all but the first axis of data (false: all but the last)");
      return s;
    }();
    return *schema;
  }
};

enum { kData, kWeight, kBias };

// (rows, features) of data as the inner product sees it.
std::pair<int64_t, int64_t> Flat(const Shape& data, bool flatten) {
  if (flatten) return {data[0], data.ProdRange(1, data.ndim())};
  return {data.ProdRange(0, data.ndim() - 1), data[data.ndim() - 1]};
}

// The three products as oneDNN sgemm calls, row-major, with data X (M, K), weight W (N, K)
// and output Y (M, N). Not oneDNN's inner product primitive: on AVX-512 it computes
// X * W^T through the slow orientation of its GEMM (4096x4096 at batch 64: 110 GFLOP/s
// against 290-390 for the other products here, ops_bench), so the forward computes
// Y^T = W * X^T into temp space and transposes it out, adding the bias on the way:
//   forward          Y^T = W X^T           then Y (+)= (Y^T)^T + bias
//   backward data    dX (+)= dY W
//   backward weight  dW (+)= dY^T X,   dbias (+)= column sums of dY
//
// bfloat16 where the CPU runs it natively (NativeBFloat16Products: AMX) goes through
// oneDNN matmul primitives on the bfloat16 blobs instead (LeNet's fc1 at batch 64: 0.14 ms
// against sgemm's 0.63), accumulating in float32; the bias gradient sums in float32.
class FullyConnectedOp : public DnnlOperator {
 public:
  explicit FullyConnectedOp(FullyConnectedParam param) : param_(param) {}

 protected:
  bool RunsNatively(DType type, const std::vector<OpReqType>& req) const override {
    return NativeBFloat16Call(type, req);
  }

  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (in[kData].dtype == DType::kBFloat16) return NativeForward(ctx, in, out[0]);
    const auto [m, k] = Flat(in[kData].shape, param_.flatten);
    const int64_t n = param_.num_hidden;
    engine::ScopedOmpThreads threads(ThreadsFor(ctx, m, n, k));
    CallBuffers buf;
    const int yt_slot = buf.Scratch(static_cast<size_t>(n * m) * sizeof(float));
    RETURN_IF_ERROR(buf.Allocate(ctx));
    float* yt = buf.fptr(yt_slot);
    RETURN_IF_ERROR(Sgemm('N', 'T', n, m, k, in[kWeight].dptr, k, in[kData].dptr, k, 0.0f, yt, m));
    const float* bias = param_.no_bias ? nullptr : static_cast<const float*>(in[kBias].dptr);
    TransposeOut(yt, bias, m, n, req[0] == OpReqType::kAddTo, static_cast<float*>(out[0].dptr));
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in, const std::vector<TBlob>&,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (in[kData].dtype == DType::kBFloat16) return NativeBackward(ctx, out_grad[0], in, req, in_grad);
    const auto [m, k] = Flat(in[kData].shape, param_.flatten);
    const int64_t n = param_.num_hidden;
    engine::ScopedOmpThreads threads(ThreadsFor(ctx, m, n, k));
    const void* dy = out_grad[0].dptr;
    auto beta = [](OpReqType r) { return r == OpReqType::kAddTo ? 1.0f : 0.0f; };
    if (req[kData] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(Sgemm('N', 'N', m, k, n, dy, n, in[kWeight].dptr, k, beta(req[kData]),
                            in_grad[kData].dptr, k));
    }
    if (req[kWeight] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(Sgemm('T', 'N', n, k, m, dy, n, in[kData].dptr, k, beta(req[kWeight]),
                            in_grad[kWeight].dptr, k));
    }
    if (!param_.no_bias && req[kBias] != OpReqType::kNullOp) {
      ColumnSums(static_cast<const float*>(dy), m, n, req[kBias] == OpReqType::kAddTo,
                 static_cast<float*>(in_grad[kBias].dptr));
    }
    return absl::OkStatus();
  }

 private:
  // sgemm takes its threads when called: as many as one (m, k) by (k, n) product repays.
  static int ThreadsFor(const OpContext& ctx, int64_t m, int64_t n, int64_t k) {
    return engine::ThreadsForWork(
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
        ctx.run_ctx.cpu_threads);
  }

  // C (rows, cols) = alpha op(A) op(B) + beta C, row-major, alpha = 1.
  static absl::Status Sgemm(char transa, char transb, int64_t rows, int64_t cols, int64_t depth,
                            const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                            void* c, int64_t ldc) {
    const dnnl_status_t st = dnnl_sgemm(transa, transb, rows, cols, depth, 1.0f,
                                        static_cast<const float*>(a), lda,
                                        static_cast<const float*>(b), ldb, beta,
                                        static_cast<float*>(c), ldc);
    if (st != dnnl_success) {
      return absl::InternalError(absl::StrCat("FullyConnected: dnnl_sgemm(", rows, "x", depth,
                                              " by ", depth, "x", cols, ") failed with status ",
                                              static_cast<int>(st)));
    }
    return absl::OkStatus();
  }

  // y (m, n) = (add ? y : 0) + yt^T + bias, in tiles so both sides stay in cache.
  static void TransposeOut(const float* yt, const float* bias, int64_t m, int64_t n, bool add,
                           float* y) {
    constexpr int64_t kTile = 32;
    for (int64_t r0 = 0; r0 < m; r0 += kTile) {
      for (int64_t c0 = 0; c0 < n; c0 += kTile) {
        const int64_t r1 = std::min(m, r0 + kTile), c1 = std::min(n, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          float* row = y + r * n;
          for (int64_t c = c0; c < c1; ++c) {
            const float v = yt[c * m + r] + (bias != nullptr ? bias[c] : 0.0f);
            row[c] = add ? row[c] + v : v;
          }
        }
      }
    }
  }

  // out (n) = (add ? out : 0) + the sums of the columns of g (m, n).
  static void ColumnSums(const float* g, int64_t m, int64_t n, bool add, float* out) {
    if (!add) std::fill(out, out + n, 0.0f);
    for (int64_t r = 0; r < m; ++r) {
      const float* row = g + r * n;
      for (int64_t c = 0; c < n; ++c) out[c] += row[c];
    }
  }

  // The native bfloat16 products of one (m, n, k) and thread count, as matmul primitives over
  // row-major blobs (a transposed operand is the same memory with swapped strides, "ba").
  struct Native {
    int threads = 1;
    dnnl::matmul::primitive_desc fwd_pd, bwd_data_pd, bwd_weights_pd;
    dnnl::matmul fwd, bwd_data, bwd_weights;
  };

  absl::Status GetNative(const OpContext& ctx, int64_t m, int64_t n, int64_t k, Native** out) {
    const int threads = ThreadsFor(ctx, m, n, k);
    return native_.Get({m, n, k, threads}, out, [&](Native* e) -> absl::Status {
      using tag = dnnl::memory::format_tag;
      const auto bf16 = dnnl::memory::data_type::bf16;
      auto md = [&](int64_t rows, int64_t cols, tag t) { return dnnl::memory::desc({rows, cols}, bf16, t); };
      e->threads = threads;
      engine::ScopedOmpThreads scoped(threads);
      // Y (m, n) = X (m, k) W^T (k, n) + bias (1, n)
      DNNL_RETURN_IF_ERROR(e->fwd_pd = dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(md(m, k, tag::ab), md(k, n, tag::ba),
                                                  param_.no_bias ? dnnl::memory::desc() : md(1, n, tag::ab),
                                                  md(m, n, tag::ab)),
                               UserScratchpadAttr(), engine()));
      // dX (m, k) = dY (m, n) W (n, k)
      DNNL_RETURN_IF_ERROR(e->bwd_data_pd = dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(md(m, n, tag::ab), md(n, k, tag::ab), md(m, k, tag::ab)),
                               UserScratchpadAttr(), engine()));
      // dW (n, k) = dY^T (n, m) X (m, k)
      DNNL_RETURN_IF_ERROR(e->bwd_weights_pd = dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(md(n, m, tag::ba), md(m, k, tag::ab), md(n, k, tag::ab)),
                               UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->fwd = dnnl::matmul(e->fwd_pd));
      DNNL_RETURN_IF_ERROR(e->bwd_data = dnnl::matmul(e->bwd_data_pd));
      DNNL_RETURN_IF_ERROR(e->bwd_weights = dnnl::matmul(e->bwd_weights_pd));
      return absl::OkStatus();
    });
  }

  // Runs `prim` over (src, weights[, bias]) into dst, with its scratchpad in temp space.
  absl::Status RunMatmul(const OpContext& ctx, const dnnl::matmul& prim,
                         const dnnl::matmul::primitive_desc& pd, void* src, void* weights, void* bias,
                         void* dst) {
    CallBuffers buf;
    const int sp = buf.Scratch(pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), engine(), src)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(pd.weights_desc(), engine(), weights)},
        {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), engine(), dst)}};
    if (bias != nullptr) args.insert({DNNL_ARG_BIAS, dnnl::memory(pd.bias_desc(), engine(), bias)});
    AddScratchpad(buf, sp, pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(prim.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    return absl::OkStatus();
  }

  absl::Status NativeForward(const OpContext& ctx, const std::vector<TBlob>& in, const TBlob& out) {
    const auto [m, k] = Flat(in[kData].shape, param_.flatten);
    Native* e;
    RETURN_IF_ERROR(GetNative(ctx, m, param_.num_hidden, k, &e));
    engine::ScopedOmpThreads threads(e->threads);
    return RunMatmul(ctx, e->fwd, e->fwd_pd, in[kData].dptr, in[kWeight].dptr,
                     param_.no_bias ? nullptr : in[kBias].dptr, out.dptr);
  }

  absl::Status NativeBackward(const OpContext& ctx, const TBlob& dy, const std::vector<TBlob>& in,
                              const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad) {
    const auto [m, k] = Flat(in[kData].shape, param_.flatten);
    const int64_t n = param_.num_hidden;
    Native* e;
    RETURN_IF_ERROR(GetNative(ctx, m, n, k, &e));
    engine::ScopedOmpThreads threads(e->threads);
    if (!param_.no_bias && req[kBias] != OpReqType::kNullOp) {
      // Column sums of dY in float32, rounded once.
      const BFloat16* g = static_cast<const BFloat16*>(dy.dptr);
      std::vector<float> sums(static_cast<size_t>(n), 0.0f);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) sums[c] += static_cast<float>(g[r * n + c]);
      }
      BFloat16* db = static_cast<BFloat16*>(in_grad[kBias].dptr);
      for (int64_t c = 0; c < n; ++c) db[c] = BFloat16(sums[c]);
    }
    if (req[kWeight] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(RunMatmul(ctx, e->bwd_weights, e->bwd_weights_pd, dy.dptr, in[kData].dptr, nullptr,
                                in_grad[kWeight].dptr));
    }
    if (req[kData] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(RunMatmul(ctx, e->bwd_data, e->bwd_data_pd, dy.dptr, in[kWeight].dptr, nullptr,
                                in_grad[kData].dptr));
    }
    return absl::OkStatus();
  }

  const FullyConnectedParam param_;
  PrimitiveCache<std::array<int64_t, 4>, Native> native_;
};

class FullyConnectedProp
    : public DnnlProperty<FullyConnectedProp, FullyConnectedParam, FullyConnectedOp> {
 public:
  // A product mixed precision runs in the low type (graph/amp.h).
  bool RunsHalfTypes() const override { return true; }
  std::vector<std::string> ListArguments() const override {
    if (param_.no_bias) return {"data", "weight"};
    return {"data", "weight", "bias"};
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[kData];
    if (!data.is_known()) return false;
    if (!param_.flatten && data.ndim() < 1) {
      return absl::InvalidArgumentError("FullyConnected: data needs at least one dimension");
    }
    const auto [m, k] = Flat(data, param_.flatten);
    (void)m;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kWeight, Shape{param_.num_hidden, k}, in));
    if (!param_.no_bias) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kBias, Shape{param_.num_hidden}, in));
    }
    Shape oshape;
    if (param_.flatten) {
      oshape = Shape{data[0], param_.num_hidden};
    } else {
      oshape = data;
      oshape[oshape.ndim() - 1] = param_.num_hidden;
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, oshape, out));
    return true;
  }

  // The output is not needed: gradients come from out_grad, data and weight.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[kData], in_data[kWeight]};
  }
  std::string TypeString() const override { return "FullyConnected"; }
};

TESSERA_REGISTER_OP_PROPERTY(FullyConnected, FullyConnectedProp)
    .Describe("Fully connected layer: out = data * weight^T + bias (oneDNN sgemm).")
    .AddParams<FullyConnectedParam>();

}  // namespace
}  // namespace tessera::ops::nn
