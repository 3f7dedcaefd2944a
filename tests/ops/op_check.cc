#include "tests/ops/op_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "ops/registry.h"

namespace tessera::ops::testing {
namespace {

// Host memory holding `n` elements of `dtype`, 64-byte aligned for vector kernels.
class Buffer {
 public:
  Buffer(int64_t n, DType dtype)
      : bytes_(std::max<size_t>(64, (n * DTypeSize(dtype) + 63) / 64 * 64)),
        data_(static_cast<char*>(std::aligned_alloc(64, bytes_)), &std::free),
        n_(n),
        dtype_(dtype) {}
  void* data() const { return data_.get(); }
  void Store(const Values& values) {
    TESSERA_TYPE_SWITCH(dtype_, T, {
      T* p = static_cast<T*>(data());
      for (int64_t i = 0; i < n_; ++i) p[i] = static_cast<T>(static_cast<AccType<T>>(values[i]));
    }, {});
  }
  Values Load() const {
    Values out(n_);
    TESSERA_TYPE_SWITCH(dtype_, T, {
      const T* p = static_cast<const T*>(data());
      for (int64_t i = 0; i < n_; ++i) out[i] = static_cast<double>(static_cast<AccType<T>>(p[i]));
    }, {});
    return out;
  }

 private:
  size_t bytes_;
  std::unique_ptr<char, decltype(&std::free)> data_;
  int64_t n_;
  DType dtype_;
};

Values Filled(int64_t n, double v) { return Values(n, v); }

// `values` as a buffer of `dtype` holds them: the kAddTo checks add to what the kernel sees,
// not to values the dtype cannot represent (integers truncate [-1, 1] to 0).
Values RoundTo(DType dtype, const Values& values) {
  Buffer buffer(static_cast<int64_t>(values.size()), dtype);
  buffer.Store(values);
  return buffer.Load();
}

std::vector<int> Iota(int begin, int n) {
  std::vector<int> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = begin + i;
  return ids;
}

bool Close(double a, double b, Tolerance tol) {
  if (std::isnan(a) || std::isnan(b)) return false;
  return std::abs(a - b) <= tol.atol + tol.rtol * std::max(std::abs(a), std::abs(b));
}

// Reports at most a few mismatching elements of one vector.
void ExpectNear(const Values& actual, const Values& expected, Tolerance tol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!Close(actual[i], expected[i], tol)) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected "
                    << expected[i];
      if (++reported == 5) return;
    }
  }
}

}  // namespace

Values RandomValues(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  std::bernoulli_distribution negative(0.5);
  Values v(n);
  for (double& x : v) x = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return v;
}

absl::StatusOr<std::unique_ptr<OpChecker>> OpChecker::Create(const std::string& op,
                                                             const KwArgs& kwargs,
                                                             const std::vector<Shape>& in_shapes,
                                                             DType dtype, uint64_t seed) {
  std::unique_ptr<OpChecker> c(new OpChecker());
  c->rng_.seed(seed);
  c->dtype_ = dtype;
  ASSIGN_OR_RETURN(c->runtime_, OwnedRuntime::Create(seed));
  ASSIGN_OR_RETURN(c->prop_, OpRegistry::Global().Create(op, kwargs));
  const OperatorProperty& prop = *c->prop_;
  c->in_shapes_ = in_shapes;
  c->in_shapes_.resize(prop.ListArguments().size());
  c->out_shapes_.resize(prop.NumOutputs());
  c->aux_shapes_.resize(prop.ListAuxiliaryStates().size());
  ASSIGN_OR_RETURN(bool shapes_known,
                   prop.InferShape(&c->in_shapes_, &c->out_shapes_, &c->aux_shapes_));
  if (!shapes_known) return absl::InvalidArgumentError(absl::StrCat(op, ": shapes not inferred"));
  std::vector<DType> in_types(c->in_shapes_.size(), dtype);
  std::vector<DType> out_types(c->out_shapes_.size(), DType::kUnknown);
  std::vector<DType> aux_types(c->aux_shapes_.size(), DType::kUnknown);
  ASSIGN_OR_RETURN(bool types_known, prop.InferType(&in_types, &out_types, &aux_types));
  if (!types_known) return absl::InvalidArgumentError(absl::StrCat(op, ": types not inferred"));
  ASSIGN_OR_RETURN(c->op_, prop.CreateOperator(Context::CPU()));
  for (const Shape& s : c->in_shapes_) c->inputs_.push_back(RandomValues(s.Size(), c->rng_));
  for (const Shape& s : c->aux_shapes_) c->aux_.push_back(RandomValues(s.Size(), c->rng_));
  return c;
}

absl::Status OpChecker::RunForward(bool is_train, OpReqType req, std::vector<Values>* outputs,
                                   int inplace_in, int inplace_out) {
  OpContext ctx;
  ctx.is_train = is_train;
  ctx.run_ctx.ctx = Context::CPU();
  ctx.run_ctx.cpu_threads = cpu_threads_;
  for (const ResourceRequest& r : prop_->ForwardResource(in_shapes_)) {
    ASSIGN_OR_RETURN(Resource res, runtime_->get().resources->Request(Context::CPU(), r));
    ctx.requested.push_back(res);
  }
  std::vector<std::unique_ptr<Buffer>> in_buf, out_buf, aux_buf;
  std::vector<TBlob> in, out, aux;
  for (size_t i = 0; i < in_shapes_.size(); ++i) {
    in_buf.push_back(std::make_unique<Buffer>(in_shapes_[i].Size(), dtype_));
    in_buf.back()->Store(inputs_[i]);
    in.emplace_back(in_buf.back()->data(), in_shapes_[i], dtype_);
  }
  std::vector<OpReqType> reqs(out_shapes_.size(), req);
  for (size_t i = 0; i < out_shapes_.size(); ++i) {
    out_buf.push_back(std::make_unique<Buffer>(out_shapes_[i].Size(), dtype_));
    out_buf.back()->Store((*outputs)[i]);
    out.emplace_back(out_buf.back()->data(), out_shapes_[i], dtype_);
  }
  if (inplace_out >= 0) {
    out[inplace_out].dptr = in[inplace_in].dptr;
    reqs[inplace_out] = OpReqType::kWriteInplace;
  }
  for (size_t i = 0; i < aux_shapes_.size(); ++i) {
    aux_buf.push_back(std::make_unique<Buffer>(aux_shapes_[i].Size(), dtype_));
    aux_buf.back()->Store(aux_[i]);
    aux.emplace_back(aux_buf.back()->data(), aux_shapes_[i], dtype_);
  }
  RETURN_IF_ERROR(op_->Forward(ctx, in, reqs, out, aux));
  for (size_t i = 0; i < out_shapes_.size(); ++i) {
    (*outputs)[i] = static_cast<int>(i) == inplace_out ? in_buf[inplace_in]->Load()
                                                        : out_buf[i]->Load();
  }
  for (size_t i = 0; i < aux_shapes_.size(); ++i) aux_[i] = aux_buf[i]->Load();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Values>> OpChecker::Forward(bool is_train) {
  std::vector<Values> outputs;
  for (const Shape& s : out_shapes_) outputs.push_back(Filled(s.Size(), NAN));
  RETURN_IF_ERROR(RunForward(is_train, OpReqType::kWriteTo, &outputs));
  last_outputs_ = outputs;
  outputs.resize(prop_->NumVisibleOutputs());
  return outputs;
}

absl::Status OpChecker::RunBackward(const std::vector<Values>& out_grads, OpReqType req,
                                    std::vector<Values>* in_grads, int inplace_ograd,
                                    int inplace_igrad) {
  // Forward first (train mode) so out_data matches the inputs; aux restored afterwards so
  // repeated calls see the same state.
  const std::vector<Values> aux_before = aux_;
  std::vector<Values> outputs;
  for (const Shape& s : out_shapes_) outputs.push_back(Filled(s.Size(), NAN));
  RETURN_IF_ERROR(RunForward(true, OpReqType::kWriteTo, &outputs));

  OpContext ctx;
  ctx.is_train = true;
  ctx.run_ctx.ctx = Context::CPU();
  ctx.run_ctx.cpu_threads = cpu_threads_;
  for (const ResourceRequest& r : prop_->BackwardResource(in_shapes_)) {
    ASSIGN_OR_RETURN(Resource res, runtime_->get().resources->Request(Context::CPU(), r));
    ctx.requested.push_back(res);
  }
  const int nv = prop_->NumVisibleOutputs();
  const int na = static_cast<int>(in_shapes_.size());
  const int no = static_cast<int>(out_shapes_.size());
  const std::vector<int> deps =
      prop_->DeclareBackwardDependency(Iota(0, nv), Iota(nv, na), Iota(nv + na, no));
  auto needed = [&](int id) { return std::find(deps.begin(), deps.end(), id) != deps.end(); };

  std::vector<std::unique_ptr<Buffer>> keep;
  auto blob = [&](const Values& v, const Shape& s) {
    keep.push_back(std::make_unique<Buffer>(s.Size(), dtype_));
    keep.back()->Store(v);
    return TBlob(keep.back()->data(), s, dtype_);
  };
  // Undeclared tensors are passed as empty blobs, so using one fails loudly.
  std::vector<TBlob> og, in, out, ig, aux;
  for (int i = 0; i < nv; ++i) og.push_back(needed(i) ? blob(out_grads[i], out_shapes_[i]) : TBlob());
  for (int i = 0; i < na; ++i) in.push_back(needed(nv + i) ? blob(inputs_[i], in_shapes_[i]) : TBlob());
  for (int i = 0; i < no; ++i) {
    out.push_back(needed(nv + na + i) ? blob(outputs[i], out_shapes_[i]) : TBlob());
  }
  std::vector<Buffer*> ig_buf;
  for (int i = 0; i < na; ++i) {
    ig.push_back(blob((*in_grads)[i], in_shapes_[i]));
    ig_buf.push_back(keep.back().get());
  }
  std::vector<OpReqType> reqs(na, req);
  if (inplace_igrad >= 0) {
    // The gradient's memory is the out_grad's: give the kernel the same buffer for both.
    TBlob shared = blob(out_grads[inplace_ograd], out_shapes_[inplace_ograd]);
    og[inplace_ograd] = shared;
    ig[inplace_igrad] = TBlob(shared.dptr, in_shapes_[inplace_igrad], dtype_);
    ig_buf[inplace_igrad] = keep.back().get();
    reqs[inplace_igrad] = OpReqType::kWriteInplace;
  }
  for (size_t i = 0; i < aux_shapes_.size(); ++i) aux.push_back(blob(aux_[i], aux_shapes_[i]));
  RETURN_IF_ERROR(op_->Backward(ctx, og, in, out, reqs, ig, aux));
  for (int i = 0; i < na; ++i) (*in_grads)[i] = ig_buf[i]->Load();
  aux_ = aux_before;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Values>> OpChecker::Backward(const std::vector<Values>& out_grads) {
  std::vector<Values> in_grads;
  for (const Shape& s : in_shapes_) in_grads.push_back(Filled(s.Size(), NAN));
  RETURN_IF_ERROR(RunBackward(out_grads, OpReqType::kWriteTo, &in_grads));
  return in_grads;
}

void OpChecker::CheckForward(const ReferenceFn& ref, Tolerance tol, bool is_train) {
  std::vector<Values> ref_in = inputs_;
  std::vector<Shape> ref_shapes = in_shapes_;
  ref_in.insert(ref_in.end(), aux_.begin(), aux_.end());
  ref_shapes.insert(ref_shapes.end(), aux_shapes_.begin(), aux_shapes_.end());
  const std::vector<Values> expected = ref(ref_in, ref_shapes);
  const int nv = prop_->NumVisibleOutputs();
  ASSERT_EQ(static_cast<int>(expected.size()), nv) << "reference returned the wrong count";
  const std::vector<Values> aux_before = aux_;
  const std::string op = prop_->TypeString();

  // kWriteTo, outputs pre-filled with NaN.
  std::vector<Values> outputs;
  for (const Shape& s : out_shapes_) outputs.push_back(Filled(s.Size(), NAN));
  ASSERT_TRUE(RunForward(is_train, OpReqType::kWriteTo, &outputs).ok());
  for (int o = 0; o < nv; ++o) ExpectNear(outputs[o], expected[o], tol, op + " write output " + std::to_string(o));
  aux_ = aux_before;

  // kAddTo onto random values.
  std::vector<Values> base, added;
  for (const Shape& s : out_shapes_) base.push_back(RoundTo(dtype_, RandomValues(s.Size(), rng_)));
  added = base;
  absl::Status status = RunForward(is_train, OpReqType::kAddTo, &added);
  ASSERT_TRUE(status.ok()) << status;
  for (int o = 0; o < nv; ++o) {
    Values want(base[o]);
    for (size_t i = 0; i < want.size(); ++i) want[i] += expected[o][i];
    ExpectNear(added[o], want, tol, op + " add-to output " + std::to_string(o));
  }
  aux_ = aux_before;

  // kNullOp leaves every output alone.
  std::vector<Values> untouched;
  for (const Shape& s : out_shapes_) untouched.push_back(Filled(s.Size(), 7.0));
  status = RunForward(is_train, OpReqType::kNullOp, &untouched);
  ASSERT_TRUE(status.ok()) << status;
  for (size_t o = 0; o < untouched.size(); ++o) {
    ExpectNear(untouched[o], Filled(untouched[o].size(), 7.0), {0, 0}, op + " null-op output");
  }
  aux_ = aux_before;

  // In place, for each pair the property offers.
  const int na = static_cast<int>(in_shapes_.size());
  for (auto [in_id, out_id] : prop_->ForwardInplaceOption(Iota(0, na), Iota(0, nv))) {
    if (in_shapes_[in_id].Size() != out_shapes_[out_id].Size()) continue;
    const Values saved = inputs_[in_id];
    outputs.clear();
    for (const Shape& s : out_shapes_) outputs.push_back(Filled(s.Size(), NAN));
    status = RunForward(is_train, OpReqType::kWriteTo, &outputs, in_id, out_id);
    ASSERT_TRUE(status.ok()) << status;
    ExpectNear(outputs[out_id], expected[out_id], tol,
               absl::StrCat(op, " in-place output ", out_id, " over input ", in_id));
    inputs_[in_id] = saved;
    aux_ = aux_before;
  }
}

double OpChecker::Loss(const std::vector<Values>& out_grads) {
  std::vector<Values> outputs;
  for (const Shape& s : out_shapes_) outputs.push_back(Filled(s.Size(), NAN));
  const std::vector<Values> aux_before = aux_;
  absl::Status status = RunForward(true, OpReqType::kWriteTo, &outputs);
  aux_ = aux_before;
  EXPECT_TRUE(status.ok()) << status;
  double loss = 0;
  for (size_t o = 0; o < out_grads.size(); ++o) {
    for (size_t i = 0; i < out_grads[o].size(); ++i) loss += out_grads[o][i] * outputs[o][i];
  }
  return loss;
}

void OpChecker::ForEachThreadCount(const std::function<void()>& check) {
  for (int threads : {1, 2, 4, 1, 2}) {
    SCOPED_TRACE(absl::StrCat("cpu_threads ", threads));
    set_cpu_threads(threads);
    check();
  }
  set_cpu_threads(1);
}

void OpChecker::CheckBackward(Tolerance tol, double eps) {
  if (eps == 0) eps = dtype_ == DType::kFloat64 ? 1e-6 : 1e-2;
  const std::string op = prop_->TypeString();
  const int nv = prop_->NumVisibleOutputs();
  const int na = static_cast<int>(in_shapes_.size());
  std::vector<Values> out_grads;
  for (int o = 0; o < nv; ++o) out_grads.push_back(RandomValues(out_shapes_[o].Size(), rng_));

  absl::StatusOr<std::vector<Values>> analytic = Backward(out_grads);
  ASSERT_TRUE(analytic.ok()) << analytic.status();

  // Central differences on up to 40 sampled elements per input.
  for (int i = 0; i < na; ++i) {
    if (std::find(skip_grad_.begin(), skip_grad_.end(), i) != skip_grad_.end()) continue;
    const int64_t n = in_shapes_[i].Size();
    std::vector<int64_t> picks(n);
    for (int64_t k = 0; k < n; ++k) picks[k] = k;
    std::shuffle(picks.begin(), picks.end(), rng_);
    picks.resize(std::min<int64_t>(n, 40));
    for (int64_t k : picks) {
      const double x = inputs_[i][k];
      inputs_[i][k] = x + eps;
      const double up = Loss(out_grads);
      inputs_[i][k] = x - eps;
      const double down = Loss(out_grads);
      inputs_[i][k] = x;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_TRUE(Close((*analytic)[i][k], numeric, tol))
          << op << " gradient of argument " << prop_->ListArguments()[i] << " element " << k
          << ": analytic " << (*analytic)[i][k] << ", numeric " << numeric;
    }
  }

  // kAddTo adds to what is there.
  std::vector<Values> base, added;
  for (const Shape& s : in_shapes_) base.push_back(RoundTo(dtype_, RandomValues(s.Size(), rng_)));
  added = base;
  absl::Status status = RunBackward(out_grads, OpReqType::kAddTo, &added);
  ASSERT_TRUE(status.ok()) << status;
  for (int i = 0; i < na; ++i) {
    Values want(base[i]);
    for (size_t k = 0; k < want.size(); ++k) want[k] += (*analytic)[i][k];
    ExpectNear(added[i], want, {1e-5, 1e-6}, op + " add-to gradient " + std::to_string(i));
  }
  // kNullOp leaves the gradients alone.
  std::vector<Values> untouched;
  for (const Shape& s : in_shapes_) untouched.push_back(Filled(s.Size(), 7.0));
  status = RunBackward(out_grads, OpReqType::kNullOp, &untouched);
  ASSERT_TRUE(status.ok()) << status;
  for (int i = 0; i < na; ++i) {
    ExpectNear(untouched[i], Filled(untouched[i].size(), 7.0), {0, 0}, op + " null-op gradient");
  }
  // In place, for each pair the property offers.
  const int no = static_cast<int>(out_shapes_.size());
  for (auto [og_id, ig_id] : prop_->BackwardInplaceOption(Iota(0, nv), Iota(nv, na),
                                                          Iota(nv + na, no),
                                                          Iota(nv + na + no, na))) {
    const int igrad = ig_id - (nv + na + no);
    if (og_id < 0 || og_id >= nv || igrad < 0 || igrad >= na) {
      ADD_FAILURE() << op << ": BackwardInplaceOption returned ids outside out_grad/in_grad";
      continue;
    }
    if (out_shapes_[og_id].Size() != in_shapes_[igrad].Size()) continue;
    std::vector<Values> grads;
    for (const Shape& s : in_shapes_) grads.push_back(Filled(s.Size(), NAN));
    status = RunBackward(out_grads, OpReqType::kWriteTo, &grads, og_id, igrad);
    ASSERT_TRUE(status.ok()) << status;
    ExpectNear(grads[igrad], (*analytic)[igrad], {1e-5, 1e-6},
               absl::StrCat(op, " in-place gradient ", igrad));
  }
}

}  // namespace tessera::ops::testing
