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
// plus dnnl_sgemm at 1024^3 as the machine's practical peak. Ours: one PushSync for
// Forward and one for Backward per iteration, with the variables of every buffer, the
// operator and its temp space, then WaitForAll; bare: the same primitives executed on a
// stream, convolutions in the layouts oneDNN prefers with no reorders (see TimeBareConv),
// the others on plain layouts as ours. Each case runs `--repeats` timed rounds after a warm-up; the
// best round counts. Prints a table, then one JSON object as the last line.
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

// Seconds per iteration: best of `repeats` rounds of `iters` calls of `step` then `sync`.
double BestSeconds(int repeats, const std::function<void()>& step,
                   const std::function<void()>& sync) {
  step();  // warm-up: primitive creation, first-touch of buffers
  sync();
  auto t0 = Clock::now();
  step();
  sync();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const int iters = std::max(1, static_cast<int>(0.25 / std::max(once, 1e-6)));
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) step();
    sync();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / iters);
  }
  return best;
}

// ---- Tessera: the registered operator pushed through the engine ----

double TimeTessera(const Runtime& rt, const std::string& name, const ops::KwArgs& kwargs,
                   const Shape& data, int repeats) {
  auto prop_or = ops::OpRegistry::Global().Create(name, kwargs);
  Check(prop_or.status(), name.c_str());
  std::unique_ptr<OperatorProperty> prop = std::move(*prop_or);
  std::vector<Shape> in(prop->ListArguments().size()), out(prop->NumOutputs()),
      aux(prop->ListAuxiliaryStates().size());
  in[0] = data;
  auto known = prop->InferShape(&in, &out, &aux);
  Check(known.status(), "InferShape");
  auto op_or = prop->CreateOperator(Context::CPU());
  Check(op_or.status(), "CreateOperator");
  std::unique_ptr<Operator> op = std::move(*op_or);
  engine::Engine& eng = *rt.engine;

  std::vector<std::unique_ptr<Buffer>> keep;
  auto blobs = [&](const std::vector<Shape>& shapes, std::vector<TBlob>* b,
                   std::vector<VarHandle>* v) {
    for (const Shape& s : shapes) {
      keep.push_back(std::make_unique<Buffer>(s.Size()));
      b->emplace_back(keep.back()->get(), s, DType::kFloat32);
      v->push_back(eng.NewVariable());
    }
  };
  std::vector<TBlob> in_b, out_b, aux_b, og_b, ig_b;
  std::vector<VarHandle> in_v, out_v, aux_v, og_v, ig_v;
  blobs(in, &in_b, &in_v);
  blobs(out, &out_b, &out_v);
  blobs(aux, &aux_b, &aux_v);
  blobs(std::vector<Shape>(out.begin(), out.begin() + prop->NumVisibleOutputs()), &og_b, &og_v);
  blobs(in, &ig_b, &ig_v);
  const VarHandle op_var = eng.NewVariable();

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
  std::vector<VarHandle> fwd_mut = out_v, bwd_mut = ig_v;
  fwd_mut.insert(fwd_mut.end(), aux_v.begin(), aux_v.end());
  fwd_mut.push_back(op_var);
  bwd_mut.push_back(op_var);
  const auto fwd_res = request(prop->ForwardResource(in), &fwd_mut);
  const auto bwd_res = request(prop->BackwardResource(in), &bwd_mut);
  std::vector<VarHandle> bwd_const = og_v;
  bwd_const.insert(bwd_const.end(), in_v.begin(), in_v.end());
  bwd_const.insert(bwd_const.end(), out_v.begin(), out_v.end());
  bwd_const.insert(bwd_const.end(), aux_v.begin(), aux_v.end());
  const std::vector<OpReqType> fwd_req(out.size(), OpReqType::kWriteTo);
  const std::vector<OpReqType> bwd_req(in.size(), OpReqType::kWriteTo);

  auto step = [&] {
    Check(eng.PushSync(
              [&](engine::RunContext rc) {
                OpContext ctx{.is_train = true, .run_ctx = rc, .requested = fwd_res};
                return op->Forward(ctx, in_b, fwd_req, out_b, aux_b);
              },
              Context::CPU(), in_v, fwd_mut, engine::FnProperty::kNormal, 0, "Forward"),
          "push");
    Check(eng.PushSync(
              [&](engine::RunContext rc) {
                OpContext ctx{.is_train = true, .run_ctx = rc, .requested = bwd_res};
                return op->Backward(ctx, og_b, in_b, out_b, bwd_req, ig_b, aux_b);
              },
              Context::CPU(), bwd_const, bwd_mut, engine::FnProperty::kNormal, 0, "Backward"),
          "push");
  };
  auto sync = [&] { Check(eng.WaitForAll(), name.c_str()); };
  const double t = BestSeconds(repeats, step, sync);
  for (auto* vs : {&in_v, &out_v, &aux_v, &og_v, &ig_v}) {
    for (VarHandle v : *vs) Check(eng.DeleteVariable(nullptr, Context::CPU(), v), "delete");
  }
  Check(eng.DeleteVariable(nullptr, Context::CPU(), op_var), "delete");
  sync();
  return t;
}

// ---- bare oneDNN ----

using dnnl::memory;
using Args = std::unordered_map<int, memory>;
using tag = memory::format_tag;

memory::desc Md(const memory::dims& d, tag t) { return memory::desc(d, memory::data_type::f32, t); }

struct Bare {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::vector<std::unique_ptr<Buffer>> keep;
  memory Mem(const memory::desc& md) {
    keep.push_back(std::make_unique<Buffer>(static_cast<int64_t>(md.get_size() / sizeof(float))));
    return memory(md, eng, keep.back()->get());
  }
};

// The peer at its best: the primitives choose their layouts (format_tag::any) and the
// tensors are kept in them, as a pure-oneDNN network would between layers; ours reorders
// from and to NCHW on every call.
double TimeBareConv(int64_t n, int64_t c, int64_t h, int64_t o, int64_t k, int64_t pad,
                    int repeats) {
  Bare b;
  const int64_t oh = h + 2 * pad - k + 1;
  auto src = Md({n, c, h, h}, tag::any), wei = Md({o, c, k, k}, tag::any), bias = Md({o}, tag::x),
       dst = Md({n, o, oh, oh}, tag::any);
  const memory::dims st{1, 1}, dil{0, 0}, pd{pad, pad};
  dnnl::convolution_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, wei, bias, dst,
       st, dil, pd, pd},
      b.eng);
  dnnl::convolution_backward_data::primitive_desc dpd(
      {dnnl::algorithm::convolution_direct, src, wei, dst, st, dil, pd, pd}, b.eng, fpd);
  dnnl::convolution_backward_weights::primitive_desc wpd(
      {dnnl::algorithm::convolution_direct, src, wei, bias, dst, st, dil, pd, pd}, b.eng, fpd);
  dnnl::convolution_forward fwd(fpd);
  dnnl::convolution_backward_data bwd_data(dpd);
  dnnl::convolution_backward_weights bwd_w(wpd);
  memory m_src = b.Mem(fpd.src_desc()), m_wei = b.Mem(fpd.weights_desc()),
         m_bias = b.Mem(fpd.bias_desc()), m_dst = b.Mem(fpd.dst_desc()),
         m_ddst = b.Mem(dpd.diff_dst_desc()), m_dsrc = b.Mem(dpd.diff_src_desc()),
         m_wei_d = b.Mem(dpd.weights_desc()), m_src_w = b.Mem(wpd.src_desc()),
         m_ddst_w = b.Mem(wpd.diff_dst_desc()), m_dwei = b.Mem(wpd.diff_weights_desc()),
         m_dbias = b.Mem(wpd.diff_bias_desc());
  auto step = [&] {
    fwd.execute(b.s, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_WEIGHTS, m_wei},
                      {DNNL_ARG_BIAS, m_bias},
                      {DNNL_ARG_DST, m_dst}});
    bwd_data.execute(
        b.s,
        {{DNNL_ARG_DIFF_DST, m_ddst}, {DNNL_ARG_WEIGHTS, m_wei_d}, {DNNL_ARG_DIFF_SRC, m_dsrc}});
    bwd_w.execute(b.s, {{DNNL_ARG_DIFF_DST, m_ddst_w},
                        {DNNL_ARG_SRC, m_src_w},
                        {DNNL_ARG_DIFF_WEIGHTS, m_dwei},
                        {DNNL_ARG_DIFF_BIAS, m_dbias}});
  };
  return BestSeconds(repeats, step, [&] { b.s.wait(); });
}

double TimeBareFc(int64_t m, int64_t k, int64_t n, int repeats) {
  Bare b;
  auto src = Md({m, k}, tag::nc), wei = Md({n, k}, tag::oi), bias = Md({n}, tag::x),
       dst = Md({m, n}, tag::nc);
  dnnl::inner_product_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, src, wei, bias, dst}, b.eng);
  dnnl::inner_product_backward_data::primitive_desc dpd({src, wei, dst}, b.eng, fpd);
  dnnl::inner_product_backward_weights::primitive_desc wpd({src, wei, bias, dst}, b.eng, fpd);
  dnnl::inner_product_forward fwd(fpd);
  dnnl::inner_product_backward_data bwd_data(dpd);
  dnnl::inner_product_backward_weights bwd_w(wpd);
  memory m_src = b.Mem(src), m_wei = b.Mem(wei), m_bias = b.Mem(bias), m_dst = b.Mem(dst),
         m_ddst = b.Mem(dst), m_dsrc = b.Mem(src), m_dwei = b.Mem(wei), m_dbias = b.Mem(bias);
  auto step = [&] {
    fwd.execute(b.s, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_WEIGHTS, m_wei},
                      {DNNL_ARG_BIAS, m_bias},
                      {DNNL_ARG_DST, m_dst}});
    bwd_data.execute(
        b.s, {{DNNL_ARG_DIFF_DST, m_ddst}, {DNNL_ARG_WEIGHTS, m_wei}, {DNNL_ARG_DIFF_SRC, m_dsrc}});
    bwd_w.execute(b.s, {{DNNL_ARG_DIFF_DST, m_ddst},
                        {DNNL_ARG_SRC, m_src},
                        {DNNL_ARG_DIFF_WEIGHTS, m_dwei},
                        {DNNL_ARG_DIFF_BIAS, m_dbias}});
  };
  return BestSeconds(repeats, step, [&] { b.s.wait(); });
}

double TimeBareBn(int64_t n, int64_t c, int64_t h, int repeats) {
  Bare b;
  auto data = Md({n, c, h, h}, tag::nchw), stat = Md({c}, tag::x);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, data, 1e-3f, flags}, b.eng);
  dnnl::batch_normalization_backward::primitive_desc bpd(
      {dnnl::prop_kind::backward, data, data, 1e-3f, flags}, b.eng, fpd);
  dnnl::batch_normalization_forward fwd(fpd);
  dnnl::batch_normalization_backward bwd(bpd);
  memory m_src = b.Mem(data), m_dst = b.Mem(data), m_ddst = b.Mem(data), m_dsrc = b.Mem(data),
         m_mean = b.Mem(stat), m_var = b.Mem(stat), m_scale = b.Mem(stat), m_shift = b.Mem(stat),
         m_dscale = b.Mem(stat), m_dshift = b.Mem(stat);
  auto step = [&] {
    fwd.execute(b.s, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_DST, m_dst},
                      {DNNL_ARG_MEAN, m_mean},
                      {DNNL_ARG_VARIANCE, m_var},
                      {DNNL_ARG_SCALE, m_scale},
                      {DNNL_ARG_SHIFT, m_shift}});
    bwd.execute(b.s, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_MEAN, m_mean},
                      {DNNL_ARG_VARIANCE, m_var},
                      {DNNL_ARG_DIFF_DST, m_ddst},
                      {DNNL_ARG_SCALE, m_scale},
                      {DNNL_ARG_SHIFT, m_shift},
                      {DNNL_ARG_DIFF_SRC, m_dsrc},
                      {DNNL_ARG_DIFF_SCALE, m_dscale},
                      {DNNL_ARG_DIFF_SHIFT, m_dshift}});
  };
  return BestSeconds(repeats, step, [&] { b.s.wait(); });
}

double SgemmGflops(int repeats) {
  constexpr int64_t kN = 1024;
  Buffer a(kN * kN), bm(kN * kN), c(kN * kN);
  auto step = [&] {
    dnnl_sgemm('N', 'N', kN, kN, kN, 1.0f, a.get(), kN, bm.get(), kN, 0.0f, c.get(), kN);
  };
  const double t = BestSeconds(repeats, step, [] {});
  return 2.0 * kN * kN * kN / t / 1e9;
}

struct Row {
  std::string name;
  double ours_s, bare_s, flops;  // flops of forward + backward (0: not a GEMM-like kernel)
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
    const double ours = TimeTessera(
        rt, "Convolution", {{"kernel", ks}, {"pad", ps}, {"num_filter", std::to_string(o)}},
        Shape{n, c, h, h}, repeats);
    const double bare = TimeBareConv(n, c, h, o, k, pad, repeats);
    rows.push_back({name, ours, bare, conv_flops(n, c, h + 2 * pad - k + 1, o, k)});
  };
  auto fc = [&](const char* name, int64_t m, int64_t k, int64_t n) {
    const double ours = TimeTessera(rt, "FullyConnected", {{"num_hidden", std::to_string(n)}},
                                    Shape{m, k}, repeats);
    rows.push_back({name, ours, TimeBareFc(m, k, n, repeats), 3.0 * 2 * m * k * n});
  };
  conv("conv_lenet1", 64, 1, 28, 20, 5, 0);
  conv("conv_lenet2", 64, 20, 12, 50, 5, 0);
  conv("conv64", 32, 64, 56, 64, 3, 1);
  fc("fc784", 64, 784, 512);
  fc("fc4096", 64, 4096, 4096);
  rows.push_back(
      {"bn", TimeTessera(rt, "BatchNorm", {{"fix_gamma", "false"}}, Shape{32, 64, 56, 56}, repeats),
       TimeBareBn(32, 64, 56, repeats), 0});
  const double sgemm = std::max(sgemm_before, SgemmGflops(repeats));

  std::printf("%-12s %12s %12s %10s %10s\n", "kernel", "tessera ms", "oneDNN ms", "ratio",
              "GFLOP/s");
  std::string json = "{";
  for (const Row& r : rows) {
    const double gflops = r.flops > 0 ? r.flops / r.ours_s / 1e9 : 0;
    std::printf("%-12s %12.3f %12.3f %10.3f %10.1f\n", r.name.c_str(), r.ours_s * 1e3,
                r.bare_s * 1e3, r.ours_s / r.bare_s, gflops);
    json +=
        absl::StrFormat(R"("%s_ms": %.3f, "%s_onednn_ms": %.3f, "%s_vs_onednn": %.3f, )", r.name,
                        r.ours_s * 1e3, r.name, r.bare_s * 1e3, r.name, r.ours_s / r.bare_s);
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
