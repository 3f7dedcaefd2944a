#include "train/module.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "graph/symbol_json.h"
#include "ndarray/arithmetic.h"
#include "ndarray/serialization.h"
#include "spdlog/spdlog.h"

namespace tessera::train {
namespace {

// A dist store's Init whose values are the first worker's on every server: it Inits before a
// barrier, the others after it, and the servers keep a key's first value.
absl::Status InitAsFirstWorker(kvstore::KVStore& store, const std::vector<int>& keys,
                               const std::vector<NDArray>& values) {
  if (store.rank() != 0) RETURN_IF_ERROR(store.Barrier());
  RETURN_IF_ERROR(store.Init(keys, values));
  if (store.rank() == 0) RETURN_IF_ERROR(store.Barrier());
  return absl::OkStatus();
}

// The barriers a dist worker passes before its first batch: Init's (InitAsFirstWorker), and
// ShareStart's when there are other workers.
int SetupBarriers(const kvstore::KVStore& store) { return store.num_workers() > 1 ? 2 : 1; }

bool Contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// One seed per (run seed, epoch), far apart for neighbouring epochs.
uint64_t EpochSeed(uint64_t seed, int epoch) {
  return seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch + 1) * 0xBF58476D1CE4E5B9ull;
}

// One seed per (run seed, epoch, batch).
uint64_t BatchSeed(uint64_t seed, int epoch, int64_t batch) {
  return EpochSeed(seed, epoch) + static_cast<uint64_t>(batch + 1) * 0x94D049BB133111EBull;
}

std::string ParamsPath(const std::string& prefix, int epoch) { return absl::StrFormat("%s-%04d.params", prefix, epoch); }
std::string StatesPath(const std::string& prefix, int epoch) { return absl::StrFormat("%s-%04d.states", prefix, epoch); }

}  // namespace

Module::Module(const Runtime& rt, graph::Symbol symbol, ModuleOptions options)
    : rt_(rt), symbol_(std::move(symbol)), options_(std::move(options)) {
  const std::vector<std::string> args = symbol_.ListArguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (Contains(options_.data_names, args[i]) || Contains(options_.label_names, args[i])) {
      input_position_[args[i]] = i;
    } else {
      param_names_.push_back(args[i]);
      param_position_.push_back(i);
    }
  }
  aux_names_ = symbol_.ListAuxiliaryStates();
}

std::pair<int64_t, int64_t> Module::Slice(size_t d) const {
  const int64_t n = static_cast<int64_t>(options_.contexts.size());
  const int64_t base = batch_size_ / n, extra = batch_size_ % n;
  const int64_t begin = static_cast<int64_t>(d) * base + std::min<int64_t>(d, extra);
  return {begin, begin + base + (static_cast<int64_t>(d) < extra ? 1 : 0)};
}

absl::Status Module::Bind(const std::vector<io::DataDesc>& data, const std::vector<io::DataDesc>& label,
                          bool for_training) {
  if (options_.contexts.empty()) return absl::InvalidArgumentError("Module: no contexts");
  if (data.empty()) return absl::InvalidArgumentError("Module::Bind: no data description");
  const std::vector<std::string> args = symbol_.ListArguments();
  std::vector<io::DataDesc> inputs = data;
  for (const io::DataDesc& d : label) {
    if (Contains(args, d.name)) inputs.push_back(d);  // a label the network does not read is fine
  }
  for (const io::DataDesc& d : data) {
    if (!Contains(args, d.name)) {
      return absl::InvalidArgumentError(absl::StrCat("Module::Bind: the symbol has no argument '", d.name,
                                                     "' (arguments: ", absl::StrJoin(args, ", "), ")"));
    }
  }
  batch_size_ = data[0].shape[0];
  if (batch_size_ < static_cast<int64_t>(options_.contexts.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Module::Bind: batch size ", batch_size_, " is smaller than the ",
                                                   options_.contexts.size(), " contexts"));
  }
  for (const std::string& fixed : options_.fixed_param_names) {
    if (!Contains(param_names_, fixed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Module::Bind: fixed_param_names: the network has no parameter '", fixed,
                       "' (parameters: ", absl::StrJoin(param_names_, ", "), ")"));
    }
  }
  // Under mixed precision the executors run the converted network; the inputs' types are
  // the iterators'.
  graph::Symbol net = symbol_;
  if (options_.amp.has_value()) {
    std::map<std::string, DType> input_types;
    for (const io::DataDesc& in : inputs) input_types[in.name] = in.dtype;
    ASSIGN_OR_RETURN(net, graph::ConvertToMixedPrecision(symbol_, *options_.amp, input_types));
    if (options_.amp->dynamic_loss_scale && options_.contexts.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Module::Bind: dynamic loss scaling needs one device, this module has ", options_.contexts.size()));
    }
    for (const Context& ctx : options_.contexts) {
      if (ctx.is_gpu()) {
        return absl::UnimplementedError(absl::StrCat(
            "Module::Bind: mixed precision (", DTypeName(options_.amp->dtype), ") on ", ctx.ToString(),
            ": the half-precision GPU kernels of FullyConnected, Convolution and Deconvolution are "
            "not built yet; train in float32 there (--tf32), or on the CPU"));
      }
    }
  }
  for_training_ = for_training;
  fused_update_.reset();
  execs_.clear();
  for (size_t d = 0; d < options_.contexts.size(); ++d) {
    const auto [begin, end] = Slice(d);
    graph::SimpleBindOptions bind{.executor = options_.executor};
    bind.grad_req = for_training ? OpReqType::kWriteTo : OpReqType::kNullOp;
    for (const io::DataDesc& in : inputs) {
      Shape s = in.shape;
      s[0] = end - begin;
      bind.shapes[in.name] = s;
      bind.dtypes[in.name] = in.dtype;
      bind.grad_req_by_name[in.name] = OpReqType::kNullOp;
    }
    for (const std::string& fixed : options_.fixed_param_names) bind.grad_req_by_name[fixed] = OpReqType::kNullOp;
    ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec,
                     graph::Executor::SimpleBind(rt_, net, options_.contexts[d], bind));
    execs_.push_back(std::move(exec));
  }
  if (options_.amp.has_value() && options_.amp->dynamic_loss_scale) {
    // Until its first overflow the scale is MXNet's and PyTorch's starting one.
    RETURN_IF_ERROR(Fill(LossScale(), kvstore::FusedUpdate::kInitialLossScale));
  }
  trained_.clear();
  for (size_t i = 0; i < param_names_.size(); ++i) {
    if (for_training && !Contains(options_.fixed_param_names, param_names_[i])) trained_.push_back(static_cast<int>(i));
  }
  return absl::OkStatus();
}

absl::Status Module::InitParams(const Initializer& init, const std::map<std::string, NDArray>& arg_params,
                                const std::map<std::string, NDArray>& aux_params, uint64_t seed) {
  if (!binded()) return absl::FailedPreconditionError("Module::InitParams: call Bind first");
  RETURN_IF_ERROR(rt_.resources->SeedRandom(seed));
  const auto fill = [&](const std::string& name, const std::map<std::string, NDArray>& given,
                        const std::map<std::string, NDArray>& first) -> absl::Status {
    const NDArray& target = first.at(name);
    if (auto it = given.find(name); it != given.end()) {
      if (it->second.shape() != target.shape()) {
        return absl::InvalidArgumentError(absl::StrCat("Module::InitParams: '", name, "' is ",
                                                       it->second.shape().ToString(), ", the network needs ",
                                                       target.shape().ToString()));
      }
      return CopyFromTo(it->second, target);
    }
    return init(name, target);
  };
  const std::map<std::string, NDArray> args0 = execs_[0]->arg_dict(), aux0 = execs_[0]->aux_dict();
  for (const std::string& name : param_names_) RETURN_IF_ERROR(fill(name, arg_params, args0));
  for (const std::string& name : aux_names_) RETURN_IF_ERROR(fill(name, aux_params, aux0));
  for (size_t d = 1; d < execs_.size(); ++d) {
    const std::map<std::string, NDArray> args = execs_[d]->arg_dict(), aux = execs_[d]->aux_dict();
    for (const std::string& name : param_names_) RETURN_IF_ERROR(CopyFromTo(args0.at(name), args.at(name)));
    for (const std::string& name : aux_names_) RETURN_IF_ERROR(CopyFromTo(aux0.at(name), aux.at(name)));
  }
  params_initialized_ = true;
  return absl::OkStatus();
}

absl::Status Module::SetParams(const std::map<std::string, NDArray>& arg_params,
                               const std::map<std::string, NDArray>& aux_params,
                               const SetParamsOptions& options) {
  if (!binded()) return absl::FailedPreconditionError("Module::SetParams: call Bind first");
  std::vector<std::string> missing, extra;
  for (const auto& [names, given] :
       {std::pair{&param_names_, &arg_params}, std::pair{&aux_names_, &aux_params}}) {
    for (const std::string& name : *names) {
      if (!given->contains(name)) missing.push_back(name);
    }
    for (const auto& [name, array] : *given) {
      if (!Contains(*names, name)) extra.push_back(name);
    }
  }
  if (!missing.empty() && !options.allow_missing) {
    return absl::InvalidArgumentError(
        absl::StrCat("the network's ", absl::StrJoin(missing, ", "),
                     " are not given (allow_missing initializes them)"));
  }
  if (!extra.empty() && !options.allow_extra) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(extra, ", "), " are not in the network (allow_extra ignores them)"));
  }
  const Xavier xavier;
  return InitParams(options.initializer ? *options.initializer : xavier, arg_params, aux_params,
                    options.seed);
}

absl::Status Module::LoadParams(const std::string& path, const SetParamsOptions& options) {
  if (!binded()) return absl::FailedPreconditionError("Module::LoadParams: call Bind first");
  ASSIGN_OR_RETURN(auto all, LoadParamsFile(rt_, path));
  std::map<std::string, NDArray> args, aux;
  for (auto& [key, array] : all) {
    if (key.rfind("arg:", 0) == 0) {
      args[key.substr(4)] = array;
    } else if (key.rfind("aux:", 0) == 0) {
      aux[key.substr(4)] = array;
    } else {
      (Contains(aux_names_, key) ? aux : args)[key] = array;
    }
  }
  if (absl::Status status = SetParams(args, aux, options); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status Module::InitOptimizer(const std::string& kvstore, const std::string& optimizer,
                                   const ops::KwArgs& optimizer_params,
                                   std::unique_ptr<kvstore::LRScheduler> lr_scheduler,
                                   std::optional<bool> update_on_kvstore, const FitOptions* fit) {
  if (!binded() || !for_training_) return absl::FailedPreconditionError("Module::InitOptimizer: bind for training first");
  fused_update_.reset();
  kvstore_.reset();
  local_optimizer_.reset();
  optimizer_ = nullptr;
  ASSIGN_OR_RETURN(const kvstore::KVStoreKind kind, kvstore::ParseKVStoreType(kvstore));
  // One device and a local store: nothing to reduce, update in place (MXNet does the same).
  std::unique_ptr<kvstore::KVStore> store;
  if (execs_.size() > 1 || kind.used_on_one_device) {
    if (fit != nullptr && fit->kvstore_factory) {
      ASSIGN_OR_RETURN(store, fit->kvstore_factory(kvstore));
    } else {
      ASSIGN_OR_RETURN(store, kvstore::KVStore::Create(kvstore));
    }
  }
  if (options_.amp.has_value() && options_.amp->dynamic_loss_scale && store != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Module::InitOptimizer: dynamic loss scaling needs one device without a store; this module has ",
        execs_.size(), " devices and kvstore '", kvstore, "'"));
  }
  if (options_.check_finite && store != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Module::InitOptimizer: check_finite needs one device without a store; this module has ",
        execs_.size(), " devices and kvstore '", kvstore, "'"));
  }
  ops::KwArgs params = optimizer_params;
  // As MXNet's Module: gradients are summed over the batch (of every worker, for dist_sync),
  // so scale them by 1/batch.
  if (std::none_of(params.begin(), params.end(), [](const auto& kv) { return kv.first == "rescale_grad"; })) {
    const bool sync = kind.dist && kind.sync;
    const int64_t samples = batch_size_ * (sync ? store->num_workers() : 1);
    params.emplace_back("rescale_grad", absl::StrCat(1.0 / static_cast<double>(samples)));
  }
  if (options_.amp.has_value() && options_.amp->loss_scale != 1) {
    // The loss operators' gradients carry the loss scale (graph/amp.h); divide it out.
    for (auto& [key, value] : params) {
      double rescale = 0;
      if (key != "rescale_grad") continue;
      if (!absl::SimpleAtod(value, &rescale)) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer parameter rescale_grad='", value, "' is not a number"));
      }
      value = absl::StrFormat("%.17g", rescale / options_.amp->loss_scale);
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kvstore::Optimizer> opt, kvstore::Optimizer::Create(optimizer, params));
  std::map<int, double> lr_mult, wd_mult;
  const std::map<std::string, graph::Attrs> attrs = symbol_.ListAttrs();
  for (size_t i = 0; i < param_names_.size(); ++i) {
    auto it = attrs.find(param_names_[i]);
    if (it == attrs.end()) continue;
    for (auto [key, target] : {std::pair{"__lr_mult__", &lr_mult}, std::pair{"__wd_mult__", &wd_mult}}) {
      auto a = it->second.find(key);
      double v = 0;
      if (a == it->second.end()) continue;
      if (!absl::SimpleAtod(a->second, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", param_names_[i], "': ", key, "='", a->second,
                                                       "' is not a number"));
      }
      (*target)[static_cast<int>(i)] = v;
    }
  }
  opt->SetLrMult(lr_mult);
  opt->SetWdMult(wd_mult);
  if (lr_scheduler != nullptr) opt->SetLrScheduler(std::move(lr_scheduler));
  update_on_kvstore_ = store != nullptr && update_on_kvstore.value_or(true);
  if (store == nullptr) {
    local_optimizer_ = std::move(opt);
    optimizer_ = local_optimizer_.get();
    return absl::OkStatus();
  }
  std::vector<int> keys;
  std::vector<NDArray> values;
  std::vector<std::vector<NDArray>> weights;
  for (int i : trained_) {
    keys.push_back(i);
    values.push_back(execs_[0]->arg_arrays()[param_position_[i]]);
    weights.emplace_back();
    for (auto& exec : execs_) weights.back().push_back(exec->arg_arrays()[param_position_[i]]);
  }
  // The first worker's values win: a resumed run's come from its checkpoint, which only the
  // first worker reads.
  RETURN_IF_ERROR(kind.dist ? InitAsFirstWorker(*store, keys, values) : store->Init(keys, values));
  if (store->rejoining()) {
    // A replacement: its predecessor's pushes are on the servers, and the weights its next
    // batch needs come from the servers below; optimizer state kept by the workers is lost.
    if (!update_on_kvstore_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", store->rank(), " cannot replace a lost one: its optimizer state was the "
          "lost worker's (update_on_kvstore is off)"));
    }
    ASSIGN_OR_RETURN(rejoin_, store->Rejoin(keys, SetupBarriers(*store)));
  }
  if (update_on_kvstore_) {
    RETURN_IF_ERROR(store->SetOptimizer(std::move(opt)));
    optimizer_ = store->optimizer();
  } else {
    local_optimizer_ = std::move(opt);
    optimizer_ = local_optimizer_.get();
  }
  if (kind.dist) {
    // Every worker starts from the servers' values (the first worker's Init won).
    RETURN_IF_ERROR(store->Pull(keys, weights));
    for (const auto& list : weights) {
      for (const NDArray& w : list) RETURN_IF_ERROR(w.WaitToRead());
    }
  }
  kvstore_ = std::move(store);
  return absl::OkStatus();
}

absl::Status Module::Forward(const io::DataBatch& batch, bool is_train) {
  RETURN_IF_ERROR(LoadBatch(batch));
  for (auto& exec : execs_) RETURN_IF_ERROR(exec->Forward(is_train));
  return absl::OkStatus();
}

absl::Status Module::LoadBatch(const io::DataBatch& batch) {
  if (!binded()) return absl::FailedPreconditionError("Module::Forward: call Bind first");
  const auto load = [&](const std::vector<std::string>& names, const std::vector<NDArray>& arrays) -> absl::Status {
    for (size_t i = 0; i < names.size() && i < arrays.size(); ++i) {
      if (arrays[i].shape()[0] != batch_size_) {
        return absl::InvalidArgumentError(absl::StrCat("Module::Forward: '", names[i], "' has ", arrays[i].shape()[0],
                                                       " rows, the module is bound for batches of ", batch_size_));
      }
      auto it = input_position_.find(names[i]);
      if (it == input_position_.end()) continue;  // a label the network does not read
      for (size_t d = 0; d < execs_.size(); ++d) {
        const auto [begin, end] = Slice(d);
        ASSIGN_OR_RETURN(NDArray rows, arrays[i].Slice(begin, end));
        RETURN_IF_ERROR(CopyFromTo(rows, execs_[d]->arg_arrays()[it->second]));
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(load(options_.data_names, batch.data));
  RETURN_IF_ERROR(load(options_.label_names, batch.label));
  return absl::OkStatus();
}

absl::StatusOr<bool> Module::TrainStep(const io::DataBatch& batch) {
  if (optimizer_ == nullptr || kvstore_ != nullptr || execs_.size() != 1 || !execs_[0]->can_train_step()) {
    return false;
  }
  RETURN_IF_ERROR(LoadBatch(batch));
  RETURN_IF_ERROR(MakeFusedUpdate());
  RETURN_IF_ERROR(fused_update_->Prepare());
  // The update's variables and pointers belong to the optimizer's state as last refreshed
  // (a loaded state brings new arrays): a new epilogue then, and the executor re-captures.
  const int64_t generation = fused_update_->generation();
  if (generation != epilogue_generation_ || step_epilogue_.id == 0) {
    static std::atomic<uintptr_t> next_id{1};
    step_epilogue_ = {.id = next_id++,
                      .body = fused_update_->DeviceWork(),
                      .reads = fused_update_->read_vars(),
                      .writes = fused_update_->write_vars()};
    epilogue_generation_ = generation;
  }
  RETURN_IF_ERROR(execs_[0]->TrainStep(step_epilogue_));
  return true;
}

absl::Status Module::Backward() {
  for (auto& exec : execs_) RETURN_IF_ERROR(exec->Backward());
  return absl::OkStatus();
}

std::vector<NDArray> Module::AuxArrays() const {
  std::vector<NDArray> aux;
  for (const auto& exec : execs_) aux.insert(aux.end(), exec->aux_arrays().begin(), exec->aux_arrays().end());
  return aux;
}

absl::Status Module::Update() {
  if (optimizer_ == nullptr) return absl::FailedPreconditionError("Module::Update: call InitOptimizer first");
  if (kvstore_ == nullptr) return UpdateInPlace();
  // What a replacement of this worker needs besides the weights: the auxiliary states as this
  // batch's forward pass left them (a store whose job replaces workers keeps them; its pushes
  // below wait until it does).
  RETURN_IF_ERROR(kvstore_->StashWorkerState(AuxArrays()));
  // Later parameters first (Backward produces their gradients first), earlier ones at higher
  // priority (MXNet's -index: the next forward pass needs them first), so on a busy stream
  // the first layers' requests and values overtake the queued ones of the later layers.
  for (auto it = trained_.rbegin(); it != trained_.rend(); ++it) {
    const int i = *it;
    const size_t at = param_position_[i];
    std::vector<NDArray> grads, weights;
    for (auto& exec : execs_) {
      grads.push_back(exec->grad_arrays()[at]);
      weights.push_back(exec->arg_arrays()[at]);
    }
    // One request per key: a parameter server answers the push with the pulled value.
    if (update_on_kvstore_) {
      RETURN_IF_ERROR(kvstore_->PushPull({i}, {grads}, {weights}, -i));
      continue;
    }
    // The store only sums: every device updates its copy with the summed gradient.
    RETURN_IF_ERROR(kvstore_->PushPull({i}, {grads}, {grads}, -i));
    for (size_t d = 0; d < execs_.size(); ++d) RETURN_IF_ERROR(optimizer_->Update(i, weights[d], grads[d], -i));
  }
  return absl::OkStatus();
}

absl::Status Module::UpdateInPlace() {
  if (trained_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(MakeFusedUpdate());
  return fused_update_->Step();
}

absl::Status Module::MakeFusedUpdate() {
  if (fused_update_ == nullptr) {
    // Every parameter in one push (one kernel launch on a GPU, a CUDA graph with the
    // executor's); bit for bit what updating them one by one gives.
    std::vector<NDArray> weights, grads;
    for (int i : trained_) {
      weights.push_back(execs_[0]->arg_arrays()[param_position_[i]]);
      grads.push_back(execs_[0]->grad_arrays()[param_position_[i]]);
    }
    kvstore::FusedUpdate::Options fused;
    fused.cuda_graphs = options_.executor.cuda_graphs;
    fused.check_finite = options_.check_finite;
    for (int i : trained_) fused.names.push_back(param_names_[i]);
    if (options_.amp.has_value() && options_.amp->dynamic_loss_scale) fused.loss_scale = LossScale();
    ASSIGN_OR_RETURN(fused_update_, kvstore::FusedUpdate::Create(optimizer_, trained_, std::move(weights),
                                                                 std::move(grads), fused));
    step_epilogue_ = {};
  }
  return absl::OkStatus();
}

NDArray Module::LossScale() const { return execs_[0]->aux_dict().at(graph::kAmpLossScale); }

absl::StatusOr<kvstore::FusedUpdate::LossScaling> Module::loss_scaling() const {
  if (fused_update_ == nullptr || !options_.amp.has_value() || !options_.amp->dynamic_loss_scale) {
    return absl::FailedPreconditionError("Module::loss_scaling: no dynamic loss scaling in this module's updates");
  }
  return fused_update_->loss_scaling();
}

absl::Status Module::UpdateMetric(EvalMetric* metric, const std::vector<NDArray>& labels, int pad) {
  for (size_t d = 0; d < execs_.size(); ++d) {
    const auto [begin, end] = Slice(d);
    const int64_t valid = std::clamp<int64_t>(batch_size_ - pad - begin, 0, end - begin);
    if (valid == 0) continue;
    std::vector<NDArray> label_rows, outputs;
    for (size_t i = 0; i < labels.size() && i < execs_[d]->outputs().size(); ++i) {
      ASSIGN_OR_RETURN(NDArray rows, labels[i].Slice(begin, end));
      label_rows.push_back(rows);
      outputs.push_back(execs_[d]->outputs()[i]);
    }
    RETURN_IF_ERROR(metric->Update(label_rows, outputs, static_cast<int>(valid)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingPosition> Module::ShareStart(TrainingPosition mine) {
  // Through the servers, as the parameters travel: a key beyond the parameters' holds the
  // first worker's position, which the others pull. Each int64 travels as two floats below
  // 2^24, exact.
  constexpr int64_t kUnit = int64_t{1} << 24;
  if (mine.epoch < 0 || mine.batch < 0 || mine.batch >= kUnit * kUnit) {
    return absl::InvalidArgumentError(absl::StrCat("cannot start at epoch ", mine.epoch, " batch ", mine.batch));
  }
  const std::vector<float> encoded = {
      static_cast<float>(mine.epoch / kUnit), static_cast<float>(mine.epoch % kUnit),
      static_cast<float>(mine.batch / kUnit), static_cast<float>(mine.batch % kUnit)};
  ASSIGN_OR_RETURN(NDArray value, FromVector<float>(rt_, Shape({4}), encoded));
  const int key = static_cast<int>(param_names_.size()) + shared_starts_++;
  RETURN_IF_ERROR(InitAsFirstWorker(*kvstore_, {key}, {value}));
  // A replacement of the first worker pulls it too: it is not where its predecessor began.
  if (kvstore_->rank() == 0 && !kvstore_->rejoining()) return mine;
  RETURN_IF_ERROR(kvstore_->Pull({key}, {{value}}));
  ASSIGN_OR_RETURN(std::vector<float> first, value.AsVector<float>());
  return TrainingPosition{static_cast<int>(static_cast<int64_t>(first[0]) * kUnit + static_cast<int64_t>(first[1])),
                          static_cast<int64_t>(first[2]) * kUnit + static_cast<int64_t>(first[3])};
}

absl::StatusOr<TrainingPosition> Module::RejoinPosition(TrainingPosition start,
                                                        int64_t batches_per_epoch) const {
  // The barriers a worker passes: the setup's, then one at the end of each epoch; between
  // them it pushes once per batch.
  const int64_t setup = SetupBarriers(*kvstore_);
  const int64_t epochs_done = std::max<int64_t>(0, rejoin_->barriers - setup);
  const int64_t pushes = rejoin_->pushes;
  auto cannot = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", kvstore_->rank(), " cannot rejoin after its predecessor's ", pushes,
        " batches and ", rejoin_->barriers, " barriers (the run started at epoch ", start.epoch,
        " batch ", start.batch, "): ", why));
  };
  if (epochs_done > 0 && batches_per_epoch < 0) {
    return cannot("its data iterator does not say how many batches an epoch has");
  }
  const int64_t before = epochs_done == 0 ? 0
                                          : (batches_per_epoch - start.batch) +
                                                (epochs_done - 1) * batches_per_epoch;
  TrainingPosition at{start.epoch + static_cast<int>(epochs_done),
                      (epochs_done == 0 ? start.batch : 0) + (pushes - before)};
  if (rejoin_->barriers < setup && pushes > 0) return cannot("it pushed before its setup");
  if (pushes < before || (batches_per_epoch >= 0 && at.batch > batches_per_epoch)) {
    return cannot(absl::StrCat("that is not a batch of epoch ", at.epoch, " (", batches_per_epoch,
                               " batches per epoch)"));
  }
  return at;
}

absl::Status Module::Fit(io::DataIter* train, io::DataIter* eval, const FitOptions& options) {
  if (!binded()) RETURN_IF_ERROR(Bind(train->provide_data(), train->provide_label(), true));
  if (!params_initialized_) {
    const Xavier xavier;
    RETURN_IF_ERROR(InitParams(options.initializer ? *options.initializer : xavier, {}, {}, options.seed));
  }
  if (optimizer_ == nullptr) {
    std::unique_ptr<kvstore::LRScheduler> scheduler;
    if (options.lr_scheduler) {
      ASSIGN_OR_RETURN(scheduler, options.lr_scheduler());
    }
    RETURN_IF_ERROR(InitOptimizer(options.kvstore, options.optimizer, options.optimizer_params,
                                  std::move(scheduler), options.update_on_kvstore, &options));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<EvalMetric> metric, CreateMetric(options.eval_metric));
  ASSIGN_OR_RETURN(std::unique_ptr<EvalMetric> eval_metric, CreateMetric(options.eval_metric));
  if (!options.checkpoint_prefix.empty()) {
    RETURN_IF_ERROR(graph::SaveSymbolFile(symbol_, options.checkpoint_prefix + "-symbol.json"));
  }
  const LoadedCheckpoint* resume = options.resume;
  TrainingPosition start{resume != nullptr ? resume->manifest.epoch() : options.begin_epoch,
                         resume != nullptr ? resume->manifest.batch() : 0};
  if (kvstore_ != nullptr && kvstore_->num_workers() > 1) {
    ASSIGN_OR_RETURN(start, ShareStart(start));
  }
  const bool rejoined = rejoin_.has_value();
  const int run_start_epoch = start.epoch;
  if (rejoined) {
    ASSIGN_OR_RETURN(start, RejoinPosition(start, train->num_batches()));
    // The auxiliary states as the predecessor's last batch the servers took left them.
    if (const std::vector<NDArray> aux = AuxArrays(); !aux.empty() && rejoin_->pushes > 0) {
      if (absl::Status restored = kvstore_->RestoreWorkerState(aux); !restored.ok()) {
        spdlog::warn("worker {}: its auxiliary states start from where this run started them: {}",
                     kvstore_->rank(), restored.ToString());
      } else {
        spdlog::info("worker {} continues its predecessor's auxiliary states after its batch {}",
                     kvstore_->rank(), rejoin_->pushes);
      }
    }
    rejoin_.reset();
  }
  const int begin_epoch = start.epoch;
  const int64_t begin_batch = start.batch;
  std::vector<CheckpointManifest::EpochMetrics> history;
  if (resume != nullptr) {
    history.assign(resume->manifest.history().begin(), resume->manifest.history().end());
    RETURN_IF_ERROR(Annotate(LoadOptimizerStateBytes(resume->optimizer_state),
                             absl::StrCat(resume->path, ": optimizer.states")));
    // The loss scale goes on as the checkpoint left it (a checkpoint without one: from 2^16).
    if (resume->manifest.has_loss_scaler() && options_.amp.has_value() &&
        options_.amp->dynamic_loss_scale) {
      const CheckpointManifest::LossScaler& scaler = resume->manifest.loss_scaler();
      RETURN_IF_ERROR(MakeFusedUpdate());
      RETURN_IF_ERROR(Annotate(fused_update_->RestoreLossScaling({.scale = scaler.scale(),
                                                                  .skipped_steps = scaler.skipped_steps(),
                                                                  .clean_steps = scaler.clean_steps()}),
                               absl::StrCat(resume->path, ": manifest's loss_scaler")));
    }
  }
  // A replacement of the worker that writes the checkpoints carries on its predecessor's
  // record from the newest one: the finished epochs' metrics, and the running epoch's metric
  // where the checkpoint stands at the batch it rejoins after.
  std::optional<CheckpointManifest> predecessor;
  if (rejoined && !options.checkpoint_dir.empty()) {
    if (absl::StatusOr<std::string> newest = NewestCheckpoint(options.checkpoint_dir); newest.ok()) {
      absl::StatusOr<CheckpointManifest> manifest = ReadCheckpointManifest(*newest);
      if (manifest.ok()) predecessor = *std::move(manifest);
    }
  }
  if (predecessor.has_value()) {
    for (const CheckpointManifest::EpochMetrics& e : predecessor->history()) {
      if (e.epoch() < begin_epoch) history.push_back(e);
    }
  }
  // The totals of `predecessor`'s running metric, if it stands after batch `batch` of `epoch`.
  auto predecessor_totals = [&](int epoch, int64_t batch) {
    std::vector<std::pair<double, int64_t>> totals;
    if (predecessor.has_value() && predecessor->epoch() == epoch && predecessor->batch() == batch) {
      for (const auto& t : predecessor->metric_totals()) totals.emplace_back(t.sum(), t.count());
    }
    return totals;
  };
  std::optional<CheckpointWriter> writer;
  if (!options.checkpoint_dir.empty()) writer.emplace(options.checkpoint_dir, options.checkpoint_policy.keep);
  auto last_checkpoint = std::chrono::steady_clock::now();
  auto checkpoint = [&](CheckpointContents contents) -> absl::Status {
    last_checkpoint = std::chrono::steady_clock::now();
    return writer->Write(std::move(contents));
  };
  auto checkpoint_due = [&](int64_t nbatch) {
    const CheckpointPolicy& policy = options.checkpoint_policy;
    if (policy.every_batches > 0 && nbatch % policy.every_batches == 0) return true;
    return policy.every_seconds > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count() >=
               policy.every_seconds;
  };
  // The iterator starts at epoch 0; a resumed run moves it to the epoch it resumes at, so
  // its shuffles match the uninterrupted run's.
  for (int e = 0; e < begin_epoch; ++e) RETURN_IF_ERROR(train->Reset());
  // A network that draws random numbers has its generators reseeded before every batch, so
  // that a run resumed at any batch draws what the uninterrupted run drew; the reseed is an
  // engine function per device, which one that draws none does without.
  const bool reseed_every_batch = std::any_of(
      execs_.begin(), execs_.end(), [](const auto& exec) { return exec->draws_random(); });
  // What follows an epoch's barrier: the evaluation, the epoch's record, its checkpoint and
  // files, the callback.
  auto end_epoch = [&](int epoch) -> absl::Status {
    std::vector<std::pair<std::string, double>> eval_values;
    if (eval != nullptr) {
      ASSIGN_OR_RETURN(eval_values, Score(eval, eval_metric.get()));
    }
    CheckpointManifest::EpochMetrics& finished = history.emplace_back();
    finished.set_epoch(epoch);
    for (const auto& [name, value] : metric->Get()) (*finished.mutable_train())[name] = value;
    for (const auto& [name, value] : eval_values) (*finished.mutable_eval())[name] = value;
    if (writer.has_value()) {
      // One copy of the parameters and one fetch of the optimizer state serve both the
      // complete checkpoint and the epoch's PREFIX-NNNN files.
      ASSIGN_OR_RETURN(CheckpointContents contents, CheckpointAt(epoch + 1, 0, nullptr, history, options));
      if (!options.checkpoint_prefix.empty()) {
        RETURN_IF_ERROR(WriteEpochFiles(options.checkpoint_prefix, epoch + 1, contents));
      }
      RETURN_IF_ERROR(checkpoint(std::move(contents)));
    } else if (!options.checkpoint_prefix.empty()) {
      RETURN_IF_ERROR(
          SaveCheckpoint(options.checkpoint_prefix, epoch + 1, true, options.checkpoint_format));
    }
    if (options.epoch_end_callback) {
      RETURN_IF_ERROR(options.epoch_end_callback(epoch, metric->Get(), eval_values));
    }
    return absl::OkStatus();
  };
  if (rejoined && begin_batch == 0 && begin_epoch > run_start_epoch) {
    // Its predecessor was lost after an epoch's barrier, maybe before that epoch's end was
    // done: done again, with the epoch's record of the checkpoint taken at its end if there
    // is one, else with the running metric of the epoch's last batch.
    const int epoch = begin_epoch - 1;
    if (predecessor.has_value() && predecessor->epoch() == begin_epoch && predecessor->batch() == 0 &&
        !history.empty() && history.back().epoch() == epoch) {
      const CheckpointManifest::EpochMetrics& done = history.back();
      if (options.epoch_end_callback) {
        RETURN_IF_ERROR(options.epoch_end_callback(
            epoch, {done.train().begin(), done.train().end()}, {done.eval().begin(), done.eval().end()}));
      }
    } else {
      metric->Reset();
      const int64_t batches = train->num_batches();
      if (batches >= 0) (void)metric->RestoreTotals(predecessor_totals(epoch, batches));
      RETURN_IF_ERROR(end_epoch(epoch));
    }
  }
  for (int epoch = begin_epoch; epoch < options.num_epoch; ++epoch) {
    if (epoch > begin_epoch) RETURN_IF_ERROR(train->Reset());
    if (!reseed_every_batch) RETURN_IF_ERROR(rt_.resources->SeedRandom(EpochSeed(options.seed, epoch)));
    metric->Reset();
    int nbatch = 0;
    if (epoch == begin_epoch && begin_batch > 0) {
      // The batches the checkpoint had done, read and dropped: the iterator's state after
      // them is the uninterrupted run's.
      for (; nbatch < begin_batch; ++nbatch) {
        ASSIGN_OR_RETURN(bool more, train->Next());
        if (!more) {
          return absl::FailedPreconditionError(absl::StrCat(
              rejoined           ? "a replaced worker"
              : resume != nullptr ? resume->path
                                  : "the first worker's checkpoint",
              ": resumes after batch ", begin_batch, " of epoch ", epoch,
              ", but this worker's data has only ", nbatch, " batches in it"));
        }
      }
      if (resume != nullptr) {
        std::vector<std::pair<double, int64_t>> totals;
        for (const auto& t : resume->manifest.metric_totals()) totals.emplace_back(t.sum(), t.count());
        RETURN_IF_ERROR(Annotate(metric->RestoreTotals(totals), resume->path));
      } else if (rejoined) {
        // Exact where the predecessor's newest checkpoint stands here; else from here on.
        (void)metric->RestoreTotals(predecessor_totals(epoch, begin_batch));
      }
    }
    while (true) {
      if (options.should_stop && options.should_stop()) {
        return absl::CancelledError(absl::StrCat("training stopped in epoch ", epoch, " after ", nbatch, " batches"));
      }
      ASSIGN_OR_RETURN(bool more, train->Next());
      if (!more) break;
      if (reseed_every_batch) {
        RETURN_IF_ERROR(rt_.resources->SeedRandom(BatchSeed(options.seed, epoch, nbatch)));
      }
      const io::DataBatch& batch = train->Value();
      ASSIGN_OR_RETURN(const bool stepped, TrainStep(batch));
      if (!stepped) {
        RETURN_IF_ERROR(Forward(batch, /*is_train=*/true));
        RETURN_IF_ERROR(Backward());
        RETURN_IF_ERROR(Update());
      }
      RETURN_IF_ERROR(UpdateMetric(metric.get(), batch.label, batch.pad));
      ++nbatch;
      if (options.batch_end_callback) options.batch_end_callback({epoch, nbatch, metric.get()});
      if (writer.has_value() && checkpoint_due(nbatch)) {
        ASSIGN_OR_RETURN(CheckpointContents contents,
                         CheckpointAt(epoch, nbatch, metric.get(), history, options));
        RETURN_IF_ERROR(checkpoint(std::move(contents)));
      }
    }
    // A NaN or an infinity the last updates met is reported by this epoch, not the next.
    if (fused_update_ != nullptr && options_.check_finite) RETURN_IF_ERROR(fused_update_->Check());
    // Workers meet at each epoch's end. A worker whose partition ran out of batches first
    // waits here, and dist_sync rounds complete without it (kvstore/server_store.h).
    if (kvstore_ != nullptr) RETURN_IF_ERROR(kvstore_->Barrier());
    RETURN_IF_ERROR(end_epoch(epoch));
  }
  if (writer.has_value()) RETURN_IF_ERROR(writer->Finish());
  for (auto& exec : execs_) {
    for (const NDArray& a : exec->arg_arrays()) RETURN_IF_ERROR(a.WaitToRead());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> Module::Score(io::DataIter* iter, EvalMetric* metric) {
  RETURN_IF_ERROR(iter->Reset());
  metric->Reset();
  while (true) {
    ASSIGN_OR_RETURN(bool more, iter->Next());
    if (!more) break;
    const io::DataBatch& batch = iter->Value();
    RETURN_IF_ERROR(Forward(batch, /*is_train=*/false));
    RETURN_IF_ERROR(UpdateMetric(metric, batch.label, batch.pad));
  }
  return metric->Get();
}

absl::StatusOr<std::vector<NDArray>> Module::Predict(io::DataIter* iter) {
  RETURN_IF_ERROR(iter->Reset());
  std::vector<std::vector<float>> rows;
  std::vector<Shape> shapes;
  while (true) {
    ASSIGN_OR_RETURN(bool more, iter->Next());
    if (!more) break;
    const io::DataBatch& batch = iter->Value();
    RETURN_IF_ERROR(Forward(batch, /*is_train=*/false));
    for (size_t d = 0; d < execs_.size(); ++d) {
      const auto [begin, end] = Slice(d);
      const int64_t valid = std::clamp<int64_t>(batch_size_ - batch.pad - begin, 0, end - begin);
      const std::vector<NDArray>& outs = execs_[d]->outputs();
      rows.resize(outs.size());
      shapes.resize(outs.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        using Floats = std::vector<float>;
        ASSIGN_OR_RETURN(Floats v, outs[k].AsVector<float>());
        const int64_t per_row = outs[k].Size() / outs[k].shape()[0];
        rows[k].insert(rows[k].end(), v.begin(), v.begin() + valid * per_row);
        shapes[k] = outs[k].shape();
      }
    }
  }
  std::vector<NDArray> result;
  for (size_t k = 0; k < rows.size(); ++k) {
    Shape s = shapes[k];
    s[0] = static_cast<int64_t>(rows[k].size()) / std::max<int64_t>(1, s.ProdRange(1, s.ndim()));
    ASSIGN_OR_RETURN(NDArray out, FromVector<float>(rt_, s, rows[k]));
    result.push_back(std::move(out));
  }
  return result;
}

absl::StatusOr<std::map<std::string, NDArray>> Module::GetArgParams() const {
  if (!binded()) return absl::FailedPreconditionError("Module: not bound");
  std::map<std::string, NDArray> out;
  const std::map<std::string, NDArray> args = execs_[0]->arg_dict();
  for (const std::string& name : param_names_) {
    ASSIGN_OR_RETURN(out[name], CopyTo(args.at(name), Context::CPU()));
  }
  return out;
}

absl::StatusOr<std::map<std::string, NDArray>> Module::GetAuxParams() const {
  if (!binded()) return absl::FailedPreconditionError("Module: not bound");
  std::map<std::string, NDArray> out;
  const std::map<std::string, NDArray> aux = execs_[0]->aux_dict();
  for (const std::string& name : aux_names_) {
    ASSIGN_OR_RETURN(out[name], CopyTo(aux.at(name), Context::CPU()));
  }
  return out;
}

absl::Status Module::WriteEpochFiles(const std::string& prefix, int epoch,
                                     const CheckpointContents& contents) const {
  RETURN_IF_ERROR(graph::SaveSymbolFile(symbol_, prefix + "-symbol.json"));
  RETURN_IF_ERROR(SaveParamsFile(ParamsPath(prefix, epoch), contents.params, contents.format));
  return WriteStringToFile(StatesPath(prefix, epoch), contents.optimizer_state);
}

absl::Status Module::SaveCheckpoint(const std::string& prefix, int epoch,
                                    bool save_optimizer_states, ParamsFormat format) const {
  RETURN_IF_ERROR(graph::SaveSymbolFile(symbol_, prefix + "-symbol.json"));
  using ArrayMap = std::map<std::string, NDArray>;
  ASSIGN_OR_RETURN(ArrayMap args, GetArgParams());
  ASSIGN_OR_RETURN(ArrayMap aux, GetAuxParams());
  ArrayMap all;
  for (auto& [name, a] : args) all["arg:" + name] = a;
  for (auto& [name, a] : aux) all["aux:" + name] = a;
  RETURN_IF_ERROR(SaveParamsFile(ParamsPath(prefix, epoch), all, format));
  if (save_optimizer_states) {
    ASSIGN_OR_RETURN(std::string state, SaveOptimizerStateBytes());
    RETURN_IF_ERROR(WriteStringToFile(StatesPath(prefix, epoch), state));
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> Module::LoadCheckpoint(const Runtime& rt, const std::string& prefix, int epoch) {
  Checkpoint ckpt;
  ASSIGN_OR_RETURN(ckpt.symbol, graph::LoadSymbolFile(prefix + "-symbol.json"));
  using ArrayMap = std::map<std::string, NDArray>;
  ASSIGN_OR_RETURN(ArrayMap all, LoadParamsFile(rt, ParamsPath(prefix, epoch)));
  for (auto& [key, array] : all) {
    if (key.rfind("arg:", 0) == 0) {
      ckpt.arg_params[key.substr(4)] = array;
    } else if (key.rfind("aux:", 0) == 0) {
      ckpt.aux_params[key.substr(4)] = array;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(ParamsPath(prefix, epoch), ": key '", key,
                                                     "' is neither arg:NAME nor aux:NAME"));
    }
  }
  return ckpt;
}

absl::Status Module::LoadOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return Annotate(LoadOptimizerStateBytes(bytes), path);
}

absl::StatusOr<std::string> Module::SaveOptimizerStateBytes() const {
  if (optimizer_ == nullptr) return absl::FailedPreconditionError("Module: no optimizer yet");
  // With dynamic loss scaling the optimizer counts the updates the device applied once synced.
  if (fused_update_ != nullptr) RETURN_IF_ERROR(fused_update_->Sync());
  return update_on_kvstore_ ? kvstore_->SaveOptimizerStates() : optimizer_->SaveState();
}

absl::Status Module::LoadOptimizerStateBytes(const std::string& bytes) {
  if (optimizer_ == nullptr) return absl::FailedPreconditionError("Module: call InitOptimizer first");
  if (fused_update_ != nullptr) RETURN_IF_ERROR(fused_update_->Sync());  // no step pending
  return update_on_kvstore_ ? kvstore_->LoadOptimizerStates(rt_, bytes) : optimizer_->LoadState(rt_, bytes);
}

absl::StatusOr<CheckpointContents> Module::CheckpointAt(
    int epoch, int64_t batch, const EvalMetric* running,
    const std::vector<CheckpointManifest::EpochMetrics>& history, const FitOptions& options) const {
  CheckpointContents contents;
  using ArrayMap = std::map<std::string, NDArray>;
  ASSIGN_OR_RETURN(ArrayMap args, GetArgParams());
  ASSIGN_OR_RETURN(ArrayMap aux, GetAuxParams());
  // The copies hold this batch's pulled weights once they are read: then every parameter
  // server has finished the round, so the optimizer state below is the same round's.
  for (auto& [name, a] : args) {
    RETURN_IF_ERROR(a.WaitToRead());
    contents.params["arg:" + name] = a;
  }
  for (auto& [name, a] : aux) {
    RETURN_IF_ERROR(a.WaitToRead());
    contents.params["aux:" + name] = a;
  }
  ASSIGN_OR_RETURN(contents.optimizer_state, SaveOptimizerStateBytes());
  contents.format = options.checkpoint_format;
  CheckpointManifest& manifest = contents.manifest;
  manifest.set_job_name(options.checkpoint_job_name);
  manifest.set_epoch(epoch);
  manifest.set_batch(batch);
  manifest.set_num_workers(options.checkpoint_num_workers);
  if (running != nullptr) {
    for (const auto& [sum, count] : running->Totals()) {
      CheckpointManifest::MetricTotal* total = manifest.add_metric_totals();
      total->set_sum(sum);
      total->set_count(count);
    }
  }
  manifest.mutable_history()->Assign(history.begin(), history.end());
  if (fused_update_ != nullptr && options_.amp.has_value() && options_.amp->dynamic_loss_scale) {
    ASSIGN_OR_RETURN(const kvstore::FusedUpdate::LossScaling scaling, fused_update_->loss_scaling());
    CheckpointManifest::LossScaler& scaler = *manifest.mutable_loss_scaler();
    scaler.set_scale(scaling.scale);
    scaler.set_clean_steps(scaling.clean_steps);
    scaler.set_skipped_steps(scaling.skipped_steps);
  }
  manifest.set_job(options.checkpoint_job);
  manifest.set_created_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  return contents;
}

}  // namespace tessera::train
