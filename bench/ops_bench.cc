// ops_bench: Tessera's oneDNN operators, pushed through the threaded engine, against the
// bare oneDNN primitives on the same shapes, forward + backward (all gradients):
//
//   conv_lenet1  Convolution 1->20, 5x5 on 64x1x28x28      (LeNet layer 1)
//   conv_lenet2  Convolution 20->50, 5x5 on 64x20x12x12    (LeNet layer 2)
//   conv64       Convolution 64->64, 3x3 pad 1 on 32x64x56x56
//   fc784        FullyConnected 784->512, batch 64
//   fc4096       FullyConnected 4096->4096, batch 64
//   bn           BatchNorm (training) on 32x64x56x56
//
// plus dnnl_sgemm at 1024^3 as the machine's practical peak. The convolutions run twice on our
// side: with the layout rule (the default) and with layouts chosen by timing
// (TESSERA_CONV_AUTOTUNE=1, ops/nn/conv_autotune.h; `_autotuned`). Ours: one PushSync for
// Forward and one for Backward per iteration, with the variables of every buffer, the
// operator and its temp space, then WaitForAll. Bare: the same primitives executed on a
// stream with every tensor kept in the layout its primitive wants (no reorders), the
// convolutions in oneDNN's own layout choice (format_tag::any; `_vs_onednn`) and, as a
// second peer, in the best of the layouts Tessera's Convolution chooses among (NHWC, or a
// plain NCHW source; `_vs_onednn_best_layout`); the others on plain layouts as ours. The
// cases of one row run their rounds interleaved after a warm-up (see BestSeconds); the best
// round of each counts. Prints a table, then one JSON object as the last line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "dnnl.hpp"
#include "ndarray/runtime.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using engine::VarHandle;
using ops::OpContext;
using ops::Operator;
using ops::OperatorProperty;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "ops_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

// A 64-byte aligned float buffer with random contents in [0.1, 1).
class Buffer {
 public:
  explicit Buffer(int64_t n)
      : n_(n), data_(static_cast<float*>(std::aligned_alloc(64, Bytes(n))), &std::free) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> dist(0.1f, 1.0f);
    for (int64_t i = 0; i < n; ++i) data_.get()[i] = dist(rng);
  }
  float* get() const { return data_.get(); }
  int64_t size() const { return n_; }

 private:
  static size_t Bytes(int64_t n) { return (n * sizeof(float) + 63) / 64 * 64; }
  int64_t n_;
  std::unique_ptr<float, decltype(&std::free)> data_;
};

// One benchmarked computation: `step` queues one iteration, `sync` waits for what was
// queued; `state` owns what they use.
struct Timed {
  std::shared_ptr<void> state;
  std::function<void()> step, sync;
};

// Seconds per iteration of each of `cases`, best of `repeats` rounds. Each case is warmed
// up (primitive creation, first touch of buffers) and given enough iterations for about a
// quarter second per round; then the rounds run interleaved (round 1 of every case, then
// round 2, ...), because this VM's speed drifts by up to 4x within minutes and timing all
// of one case before its peer measured the drift more than the kernels.
std::vector<double> BestSeconds(int repeats, const std::vector<Timed>& cases) {
  std::vector<int> iters;
  for (const Timed& c : cases) {
    c.step();
    c.sync();
    auto t0 = Clock::now();
    c.step();
    c.sync();
    const double once = std::chrono::duration<double>(Clock::now() - t0).count();
    iters.push_back(std::max(1, static_cast<int>(0.25 / std::max(once, 1e-6))));
  }
  std::vector<double> best(cases.size(), 1e30);
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < cases.size(); ++i) {
      auto start = Clock::now();
      for (int k = 0; k < iters[i]; ++k) cases[i].step();
      cases[i].sync();
      best[i] =
          std::min(best[i], std::chrono::duration<double>(Clock::now() - start).count() / iters[i]);
    }
  }
  return best;
}

// ---- Tessera: the registered operator pushed through the engine ----

// The operator with its buffers and engine variables; deletes the variables when done.
struct TesseraState {
  explicit TesseraState(engine::Engine& e) : eng(e) {}
  ~TesseraState() {
    for (VarHandle v : vars) Check(eng.DeleteVariable(nullptr, Context::CPU(), v), "delete");
    Check(eng.WaitForAll(), "delete");
  }
  engine::Engine& eng;
  std::unique_ptr<OperatorProperty> prop;
  std::unique_ptr<Operator> op;
  std::vector<std::unique_ptr<Buffer>> keep;
  std::vector<VarHandle> vars;  // every variable made here
  std::vector<TBlob> in_b, out_b, aux_b, og_b, ig_b;
  std::vector<engine::Resource> fwd_res, bwd_res;
  std::vector<VarHandle> fwd_const, fwd_mut, bwd_const, bwd_mut;
  std::vector<OpReqType> fwd_req, bwd_req;
};

Timed TesseraCase(const Runtime& rt, const std::string& name, const ops::KwArgs& kwargs,
                  const Shape& data) {
  auto st = std::make_shared<TesseraState>(*rt.engine);
  auto prop_or = ops::OpRegistry::Global().Create(name, kwargs);
  Check(prop_or.status(), name.c_str());
  st->prop = std::move(*prop_or);
  const OperatorProperty& prop = *st->prop;
  std::vector<Shape> in(prop.ListArguments().size()), out(prop.NumOutputs()),
      aux(prop.ListAuxiliaryStates().size());
  in[0] = data;
  auto known = prop.InferShape(&in, &out, &aux);
  Check(known.status(), "InferShape");
  auto op_or = prop.CreateOperator(Context::CPU());
  Check(op_or.status(), "CreateOperator");
  st->op = std::move(*op_or);
  engine::Engine& eng = st->eng;

  auto blobs = [&](const std::vector<Shape>& shapes, std::vector<TBlob>* b,
                   std::vector<VarHandle>* v) {
    for (const Shape& s : shapes) {
      st->keep.push_back(std::make_unique<Buffer>(s.Size()));
      b->emplace_back(st->keep.back()->get(), s, DType::kFloat32);
      v->push_back(eng.NewVariable());
      st->vars.push_back(v->back());
    }
  };
  std::vector<VarHandle> in_v, out_v, aux_v, og_v, ig_v;
  blobs(in, &st->in_b, &in_v);
  blobs(out, &st->out_b, &out_v);
  blobs(aux, &st->aux_b, &aux_v);
  blobs(std::vector<Shape>(out.begin(), out.begin() + prop.NumVisibleOutputs()), &st->og_b, &og_v);
  blobs(in, &st->ig_b, &ig_v);
  const VarHandle op_var = eng.NewVariable();
  st->vars.push_back(op_var);

  auto request = [&](const std::vector<engine::ResourceRequest>& reqs,
                     std::vector<VarHandle>* vars) {
    std::vector<engine::Resource> res;
    for (const auto& r : reqs) {
      auto got = rt.resources->Request(Context::CPU(), r);
      Check(got.status(), "resource");
      res.push_back(*got);
      vars->push_back(got->var);
    }
    return res;
  };
  st->fwd_const = in_v;
  st->fwd_mut = out_v;
  st->fwd_mut.insert(st->fwd_mut.end(), aux_v.begin(), aux_v.end());
  st->fwd_mut.push_back(op_var);
  st->bwd_mut = ig_v;
  st->bwd_mut.push_back(op_var);
  st->fwd_res = request(prop.ForwardResource(in), &st->fwd_mut);
  st->bwd_res = request(prop.BackwardResource(in), &st->bwd_mut);
  st->bwd_const = og_v;
  for (const auto* vs : {&in_v, &out_v, &aux_v}) {
    st->bwd_const.insert(st->bwd_const.end(), vs->begin(), vs->end());
  }
  st->fwd_req.assign(out.size(), OpReqType::kWriteTo);
  st->bwd_req.assign(in.size(), OpReqType::kWriteTo);

  TesseraState* s = st.get();
  auto step = [s] {
    Check(s->eng.PushSync(
              [s](engine::RunContext rc) {
                OpContext ctx{.is_train = true, .run_ctx = rc, .requested = s->fwd_res};
                return s->op->Forward(ctx, s->in_b, s->fwd_req, s->out_b, s->aux_b);
              },
              Context::CPU(), s->fwd_const, s->fwd_mut, engine::FnProperty::kNormal, 0, "Forward"),
          "push");
    Check(s->eng.PushSync(
              [s](engine::RunContext rc) {
                OpContext ctx{.is_train = true, .run_ctx = rc, .requested = s->bwd_res};
                return s->op->Backward(ctx, s->og_b, s->in_b, s->out_b, s->bwd_req, s->ig_b,
                                       s->aux_b);
              },
              Context::CPU(), s->bwd_const, s->bwd_mut, engine::FnProperty::kNormal, 0, "Backward"),
          "push");
  };
  auto sync = [s] { Check(s->eng.WaitForAll(), "WaitForAll"); };
  return {st, step, sync};
}

// ---- bare oneDNN ----

using dnnl::memory;
using Args = std::unordered_map<int, memory>;
using tag = memory::format_tag;

memory::desc Md(const memory::dims& d, tag t) { return memory::desc(d, memory::data_type::f32, t); }

// Bare oneDNN: primitives executed in order on one stream, each with its arguments.
struct Bare {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::vector<std::unique_ptr<Buffer>> keep;
  std::vector<std::pair<dnnl::primitive, std::unordered_map<int, memory>>> calls;

  memory Mem(const memory::desc& md) {
    keep.push_back(std::make_unique<Buffer>(static_cast<int64_t>(md.get_size() / sizeof(float))));
    return memory(md, eng, keep.back()->get());
  }
};

Timed BareCase(std::shared_ptr<Bare> bare) {
  Bare* b = bare.get();
  return {bare,
          [b] {
            for (auto& [prim, args] : b->calls) prim.execute(b->s, args);
          },
          [b] { b->s.wait(); }};
}

// Bare convolution forward + backward with source and destination (and their gradients)
// in `act` layouts (format_tag::any: the primitives choose) and the weights in the
// primitives' choice, every tensor kept in the layout its primitive wants, as a
// pure-oneDNN network would between layers: no reorders.
Timed BareConvCase(int64_t n, int64_t c, int64_t h, int64_t o, int64_t k, int64_t pad, tag src_tag,
                   tag dst_tag) {
  auto b = std::make_shared<Bare>();
  const int64_t oh = h + 2 * pad - k + 1;
  auto src = Md({n, c, h, h}, src_tag), wei = Md({o, c, k, k}, tag::any), bias = Md({o}, tag::x),
       dst = Md({n, o, oh, oh}, dst_tag);
  const memory::dims st{1, 1}, dil{0, 0}, pd{pad, pad};
  dnnl::convolution_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, wei, bias, dst,
       st, dil, pd, pd},
      b->eng);
  dnnl::convolution_backward_data::primitive_desc dpd(
      {dnnl::algorithm::convolution_direct, src, wei, dst, st, dil, pd, pd}, b->eng, fpd);
  dnnl::convolution_backward_weights::primitive_desc wpd(
      {dnnl::algorithm::convolution_direct, src, wei, bias, dst, st, dil, pd, pd}, b->eng, fpd);
  b->calls.push_back({dnnl::convolution_forward(fpd),
                      {{DNNL_ARG_SRC, b->Mem(fpd.src_desc())},
                       {DNNL_ARG_WEIGHTS, b->Mem(fpd.weights_desc())},
                       {DNNL_ARG_BIAS, b->Mem(fpd.bias_desc())},
                       {DNNL_ARG_DST, b->Mem(fpd.dst_desc())}}});
  b->calls.push_back({dnnl::convolution_backward_data(dpd),
                      {{DNNL_ARG_DIFF_DST, b->Mem(dpd.diff_dst_desc())},
                       {DNNL_ARG_WEIGHTS, b->Mem(dpd.weights_desc())},
                       {DNNL_ARG_DIFF_SRC, b->Mem(dpd.diff_src_desc())}}});
  b->calls.push_back({dnnl::convolution_backward_weights(wpd),
                      {{DNNL_ARG_DIFF_DST, b->Mem(wpd.diff_dst_desc())},
                       {DNNL_ARG_SRC, b->Mem(wpd.src_desc())},
                       {DNNL_ARG_DIFF_WEIGHTS, b->Mem(wpd.diff_weights_desc())},
                       {DNNL_ARG_DIFF_BIAS, b->Mem(wpd.diff_bias_desc())}}});
  return BareCase(b);
}

Timed BareFcCase(int64_t m, int64_t k, int64_t n) {
  auto b = std::make_shared<Bare>();
  auto src = Md({m, k}, tag::nc), wei = Md({n, k}, tag::oi), bias = Md({n}, tag::x),
       dst = Md({m, n}, tag::nc);
  dnnl::inner_product_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, src, wei, bias, dst}, b->eng);
  dnnl::inner_product_backward_data::primitive_desc dpd({src, wei, dst}, b->eng, fpd);
  dnnl::inner_product_backward_weights::primitive_desc wpd({src, wei, bias, dst}, b->eng, fpd);
  memory m_src = b->Mem(src), m_wei = b->Mem(wei), m_ddst = b->Mem(dst);
  b->calls.push_back({dnnl::inner_product_forward(fpd),
                      {{DNNL_ARG_SRC, m_src},
                       {DNNL_ARG_WEIGHTS, m_wei},
                       {DNNL_ARG_BIAS, b->Mem(bias)},
                       {DNNL_ARG_DST, b->Mem(dst)}}});
  b->calls.push_back(
      {dnnl::inner_product_backward_data(dpd),
       {{DNNL_ARG_DIFF_DST, m_ddst}, {DNNL_ARG_WEIGHTS, m_wei}, {DNNL_ARG_DIFF_SRC, b->Mem(src)}}});
  b->calls.push_back({dnnl::inner_product_backward_weights(wpd),
                      {{DNNL_ARG_DIFF_DST, m_ddst},
                       {DNNL_ARG_SRC, m_src},
                       {DNNL_ARG_DIFF_WEIGHTS, b->Mem(wei)},
                       {DNNL_ARG_DIFF_BIAS, b->Mem(bias)}}});
  return BareCase(b);
}

Timed BareBnCase(int64_t n, int64_t c, int64_t h) {
  auto b = std::make_shared<Bare>();
  auto data = Md({n, c, h, h}, tag::nchw), stat = Md({c}, tag::x);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, data, 1e-3f, flags}, b->eng);
  dnnl::batch_normalization_backward::primitive_desc bpd(
      {dnnl::prop_kind::backward, data, data, 1e-3f, flags}, b->eng, fpd);
  memory m_src = b->Mem(data), m_mean = b->Mem(stat), m_var = b->Mem(stat), m_scale = b->Mem(stat),
         m_shift = b->Mem(stat);
  b->calls.push_back({dnnl::batch_normalization_forward(fpd),
                      {{DNNL_ARG_SRC, m_src},
                       {DNNL_ARG_DST, b->Mem(data)},
                       {DNNL_ARG_MEAN, m_mean},
                       {DNNL_ARG_VARIANCE, m_var},
                       {DNNL_ARG_SCALE, m_scale},
                       {DNNL_ARG_SHIFT, m_shift}}});
  b->calls.push_back({dnnl::batch_normalization_backward(bpd),
                      {{DNNL_ARG_SRC, m_src},
                       {DNNL_ARG_MEAN, m_mean},
                       {DNNL_ARG_VARIANCE, m_var},
                       {DNNL_ARG_DIFF_DST, b->Mem(data)},
                       {DNNL_ARG_SCALE, m_scale},
                       {DNNL_ARG_SHIFT, m_shift},
                       {DNNL_ARG_DIFF_SRC, b->Mem(data)},
                       {DNNL_ARG_DIFF_SCALE, b->Mem(stat)},
                       {DNNL_ARG_DIFF_SHIFT, b->Mem(stat)}}});
  return BareCase(b);
}

double SgemmGflops(int repeats) {
  constexpr int64_t kN = 1024;
  Buffer a(kN * kN), bm(kN * kN), c(kN * kN);
  auto step = [&] {
    dnnl_sgemm('N', 'N', kN, kN, kN, 1.0f, a.get(), kN, bm.get(), kN, 0.0f, c.get(), kN);
  };
  const double t = BestSeconds(repeats, {{nullptr, step, [] {}}})[0];
  return 2.0 * kN * kN * kN / t / 1e9;
}

struct Row {
  std::string name;
  double ours_s, bare_s, flops;  // flops of forward + backward (0: not a GEMM-like kernel)
  // Convolutions: the fastest bare run over the layouts Tessera chooses among, and which.
  double best_bare_s = 0;
  std::string best_layout;
  double autotuned_s = 0;  // ours with TESSERA_CONV_AUTOTUNE=1 (layouts chosen by timing)
};

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  InitLogging();
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--repeats=", 0) == 0 && absl::SimpleAtoi(arg.substr(10), &repeats) &&
        repeats > 0) {
      continue;
    }
    std::fprintf(stderr, "usage: ops_bench [--repeats=N]\n");
    return 2;
  }
  auto engine_options = engine::EngineOptions::FromEnv();
  Check(engine_options.status(), "engine options");
  engine_options->kind = engine::EngineOptions::Kind::kThreaded;
  auto storage_options = engine::StorageOptions::FromEnv();
  Check(storage_options.status(), "storage options");
  auto runtime = OwnedRuntime::Create(*engine_options, *storage_options);
  Check(runtime.status(), "runtime");
  const Runtime& rt = (*runtime)->get();

  // Forward + backward (data and weights) of a convolution: three times the forward.
  auto conv_flops = [](double n, double c, double oh, double o, double k) {
    return 3 * 2 * n * o * oh * oh * c * k * k;
  };
  // The peak is measured before and after the cases and the higher one kept, so that a
  // burst of other load on the machine during one measurement does not inflate *_of_sgemm.
  const double sgemm_before = SgemmGflops(repeats);
  std::vector<Row> rows;
  auto conv = [&](const char* name, int64_t n, int64_t c, int64_t h, int64_t o, int64_t k,
                  int64_t pad) {
    const std::string ks = absl::StrFormat("(%d,%d)", k, k),
                      ps = absl::StrFormat("(%d,%d)", pad, pad);
    // The bare layouts: oneDNN's choice first (the `_vs_onednn` peer), then those
    // ConvLayoutPolicy::kAvoidChannelPadding may pick instead.
    const std::vector<std::pair<std::string, std::pair<tag, tag>>> layouts = {
        {"any", {tag::any, tag::any}},
        {"nhwc", {tag::nhwc, tag::nhwc}},
        {"nchw_src", {tag::nchw, tag::any}}};
    const ops::KwArgs kwargs = {{"kernel", ks}, {"pad", ps}, {"num_filter", std::to_string(o)}};
    std::vector<Timed> cases = {TesseraCase(rt, "Convolution", kwargs, Shape{n, c, h, h})};
    // The same operator made with layouts chosen by timing (it reads the variable when made).
    setenv("TESSERA_CONV_AUTOTUNE", "1", 1);
    cases.push_back(TesseraCase(rt, "Convolution", kwargs, Shape{n, c, h, h}));
    unsetenv("TESSERA_CONV_AUTOTUNE");
    for (const auto& [layout, tags] : layouts) {
      cases.push_back(BareConvCase(n, c, h, o, k, pad, tags.first, tags.second));
    }
    const std::vector<double> t = BestSeconds(repeats, cases);
    Row row{name, t[0], t[2], conv_flops(n, c, h + 2 * pad - k + 1, o, k)};
    row.autotuned_s = t[1];
    const size_t best = std::min_element(t.begin() + 2, t.end()) - t.begin();
    row.best_bare_s = t[best];
    row.best_layout = layouts[best - 2].first;
    rows.push_back(row);
  };
  auto pair = [&](const char* name, Timed ours, Timed bare, double flops) {
    const std::vector<double> t = BestSeconds(repeats, {std::move(ours), std::move(bare)});
    rows.push_back({name, t[0], t[1], flops});
  };
  auto fc = [&](const char* name, int64_t m, int64_t k, int64_t n) {
    pair(name, TesseraCase(rt, "FullyConnected", {{"num_hidden", std::to_string(n)}}, Shape{m, k}),
         BareFcCase(m, k, n), 3.0 * 2 * m * k * n);
  };
  conv("conv_lenet1", 64, 1, 28, 20, 5, 0);
  conv("conv_lenet2", 64, 20, 12, 50, 5, 0);
  conv("conv64", 32, 64, 56, 64, 3, 1);
  fc("fc784", 64, 784, 512);
  fc("fc4096", 64, 4096, 4096);
  pair("bn", TesseraCase(rt, "BatchNorm", {{"fix_gamma", "false"}}, Shape{32, 64, 56, 56}),
       BareBnCase(32, 64, 56), 0);
  const double sgemm = std::max(sgemm_before, SgemmGflops(repeats));

  std::printf("%-12s %10s %10s %7s %8s %14s %7s %10s %7s\n", "kernel", "tessera ms", "oneDNN ms",
              "ratio", "GFLOP/s", "best layout ms", "ratio", "timed ms", "ratio");
  std::string json = "{";
  for (const Row& r : rows) {
    const double gflops = r.flops > 0 ? r.flops / r.ours_s / 1e9 : 0;
    std::printf("%-12s %10.3f %10.3f %7.3f %8.1f", r.name.c_str(), r.ours_s * 1e3, r.bare_s * 1e3,
                r.ours_s / r.bare_s, gflops);
    if (r.best_bare_s > 0) {
      std::printf(" %8.3f %-5s %7.3f %10.3f %7.3f", r.best_bare_s * 1e3, r.best_layout.c_str(),
                  r.ours_s / r.best_bare_s, r.autotuned_s * 1e3, r.autotuned_s / r.best_bare_s);
    }
    std::printf("\n");
    json +=
        absl::StrFormat(R"("%s_ms": %.3f, "%s_onednn_ms": %.3f, "%s_vs_onednn": %.3f, )", r.name,
                        r.ours_s * 1e3, r.name, r.bare_s * 1e3, r.name, r.ours_s / r.bare_s);
    if (r.best_bare_s > 0) {
      json += absl::StrFormat(
          R"("%s_onednn_best_layout": "%s", "%s_onednn_best_layout_ms": %.3f, )"
          R"("%s_vs_onednn_best_layout": %.3f, )",
          r.name, r.best_layout, r.name, r.best_bare_s * 1e3, r.name, r.ours_s / r.best_bare_s);
      json += absl::StrFormat(R"("%s_autotuned_ms": %.3f, "%s_autotuned_vs_onednn_best_layout": %.3f, )",
                              r.name, r.autotuned_s * 1e3, r.name, r.autotuned_s / r.best_bare_s);
    }
    if (r.name == "conv64" || r.name == "fc4096") {
      json += absl::StrFormat(R"("%s_gflops": %.1f, "%s_of_sgemm": %.3f, )", r.name, gflops, r.name,
                              gflops / sgemm);
    }
  }
  std::printf("sgemm 1024^3: %.1f GFLOP/s\n", sgemm);
  json += absl::StrFormat(R"("sgemm_gflops": %.1f, "repeats": %d, "cpu_workers": %d})", sgemm,
                          repeats, engine_options->cpu_workers);
  std::printf("%s\n", json.c_str());
  return 0;
}
