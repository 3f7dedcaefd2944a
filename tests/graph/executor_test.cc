// The static executor: outputs against op-by-op NDArray evaluation, gradients of whole
// graphs against finite differences, grad_req semantics, Reshape, device groups and errors.
#include "graph/executor.h"

#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <set>

#include "core/status_matchers.h"
#include "examples/models.h"
#include "gmock/gmock.h"
#include "graph/memory_plan.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "ops/imperative.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using namespace tessera::graph::testing;  // NOLINT(build/namespaces)

Symbol Op(const std::string& op, const ops::KwArgs& params, const std::vector<SymbolInput>& inputs,
          const std::string& name = "") {
  auto s = Symbol::Create(op, params, inputs, name);
  TESSERA_CHECK(s.ok());
  return *s;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() const { return owned_->get(); }

  std::unique_ptr<Executor> Bind(const Symbol& net, const std::map<std::string, Shape>& shapes,
                                 OpReqType req = OpReqType::kWriteTo, ExecutorOptions options = {}) {
    SimpleBindOptions o{.shapes = shapes, .grad_req = req, .executor = options};
    auto exec = Executor::SimpleBind(rt(), net, Context::CPU(), o);
    TESSERA_CHECK(exec.ok());
    return std::move(exec).value();
  }

  NDArray Array(const Shape& shape, const std::vector<float>& values) {
    auto a = FromVector<float>(rt(), shape, values);
    TESSERA_CHECK(a.ok());
    return *a;
  }

  // Backward(head_grads) against central differences of sum(output * head_grad) for a few
  // elements of every argument not in `skip`.
  void CheckGradients(const Symbol& net, const std::map<std::string, Shape>& shapes,
                      const std::set<std::string>& skip = {}) {
    auto exec = Bind(net, shapes);
    std::mt19937 rng(7);
    for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
    std::vector<NDArray> head;
    std::vector<std::vector<float>> head_values;
    for (const NDArray& out : exec->outputs()) {
      head_values.push_back(RandomValues(out.Size(), &rng));
      head.push_back(Array(out.shape(), head_values.back()));
    }
    ASSERT_THAT(exec->Forward(true), IsOk());
    ASSERT_THAT(exec->Backward(head), IsOk());
    const std::vector<std::string> names = net.ListArguments();
    for (size_t a = 0; a < names.size(); ++a) {
      if (skip.contains(names[a])) continue;
      NDArray arg = exec->arg_arrays()[a];
      const std::vector<float> grad = Values(exec->grad_arrays()[a]);
      std::vector<float> values = Values(arg);
      for (int trial = 0; trial < 4; ++trial) {
        const size_t i = std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng);
        const float eps = 5e-3f, original = values[i];
        double j[2];
        for (int side = 0; side < 2; ++side) {
          values[i] = original + (side == 0 ? eps : -eps);
          ASSERT_THAT(arg.SyncCopyFromCPU(values.data(), arg.Size()), IsOk());
          ASSERT_THAT(exec->Forward(true), IsOk());
          j[side] = Objective(exec->outputs(), head_values);
        }
        values[i] = original;
        ASSERT_THAT(arg.SyncCopyFromCPU(values.data(), arg.Size()), IsOk());
        const double numeric = (j[0] - j[1]) / (2 * eps);
        EXPECT_NEAR(grad[i], numeric, 2e-2 * std::max(1.0, std::abs(numeric)))
            << "d/d " << names[a] << "[" << i << "]";
      }
    }
  }

  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(ExecutorTest, ForwardMatchesOpByOpEvaluation) {
  auto net = examples::Mlp(2, 5, 3);
  ASSERT_THAT(net.status(), IsOk());
  auto exec = Bind(*net, {{"data", Shape{4, 6}}});
  std::mt19937 rng(1);
  for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
  ASSERT_THAT(exec->Forward(false), IsOk());

  std::map<std::string, NDArray> arg = exec->arg_dict();
  NDArray x = arg["data"];
  for (int layer = 1; layer <= 3; ++layer) {
    const std::string fc = "fc" + std::to_string(layer);
    auto out = ops::Invoke("FullyConnected", {{"num_hidden", layer == 3 ? "3" : "5"}},
                           {x, arg[fc + "_weight"], arg[fc + "_bias"]});
    ASSERT_THAT(out.status(), IsOk());
    x = (*out)[0];
    if (layer < 3) {
      auto act = ops::Invoke("Activation", {{"act_type", "relu"}}, {x});
      ASSERT_THAT(act.status(), IsOk());
      x = (*act)[0];
    }
  }
  auto softmax = ops::Invoke("SoftmaxOutput", {}, {x, arg["softmax_label"]});
  ASSERT_THAT(softmax.status(), IsOk());
  const std::vector<float> want = Values((*softmax)[0]), got = Values(exec->outputs()[0]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST_F(ExecutorTest, MlpGradientsMatchFiniteDifferences) {
  Symbol x = Symbol::Variable("data");
  Symbol h = Op("Activation", {{"act_type", "tanh"}}, {Op("FullyConnected", {{"num_hidden", "7"}}, {x}, "fc1")});
  Symbol y = Op("FullyConnected", {{"num_hidden", "3"}}, {h}, "fc2");
  CheckGradients(y, {{"data", Shape{5, 4}}});
}

TEST_F(ExecutorTest, MultiUseValuesAccumulateGradients) {
  // data feeds two layers; fc1's output feeds two activations whose sum is the output.
  Symbol x = Symbol::Variable("data");
  Symbol fc1 = Op("FullyConnected", {{"num_hidden", "6"}}, {x}, "fc1");
  Symbol fc2 = Op("FullyConnected", {{"num_hidden", "6"}}, {x}, "fc2");
  Symbol a = Op("Activation", {{"act_type", "tanh"}}, {fc1}, "a");
  Symbol b = Op("Activation", {{"act_type", "sigmoid"}}, {fc1}, "b");
  Symbol sum = Op("elemwise_add", {}, {Op("elemwise_add", {}, {a, b}), Op("elemwise_mul", {}, {fc2, fc1})});
  CheckGradients(sum, {{"data", Shape{3, 5}}});
  // The graph sums fc1's three contributions (and data's two) with ElementWiseSum nodes.
  auto exec = Bind(sum, {{"data", Shape{3, 5}}});
  int sums = 0;
  for (const ExecNode& n : exec->exec_graph().nodes) sums += n.kind == ExecNodeKind::kGradSum;
  EXPECT_EQ(sums, 2);
}

TEST_F(ExecutorTest, ConvolutionBatchNormPoolingGradients) {
  Symbol x = Symbol::Variable("data");
  Symbol c = Op("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"pad", "(1,1)"}}, {x}, "conv");
  Symbol bn = Op("BatchNorm", {{"fix_gamma", "false"}}, {c}, "bn");
  Symbol act = Op("Activation", {{"act_type", "tanh"}}, {bn}, "act");
  Symbol pool = Op("Pooling", {{"pool_type", "avg"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}}, {act}, "pool");
  Symbol fc = Op("FullyConnected", {{"num_hidden", "2"}}, {Op("Flatten", {}, {pool})}, "fc");
  CheckGradients(fc, {{"data", Shape{2, 2, 6, 6}}});
}

TEST_F(ExecutorTest, MultiOutputNodesWithUnusedOutputsAndGroups) {
  Symbol x = Symbol::Variable("data");
  Symbol split = Op("SliceChannel", {{"num_outputs", "3"}}, {x}, "split");
  Symbol first = Op("Activation", {{"act_type", "tanh"}}, {*split[0]}, "t0");
  Symbol third = Op("FullyConnected", {{"num_hidden", "2"}}, {*split[2]}, "fc");
  // split's middle output is unused: its gradient is zero.
  CheckGradients(Symbol::Group({first, third}), {{"data", Shape{4, 6}}});
}

TEST_F(ExecutorTest, SoftmaxOutputGradientIsCrossEntropyGradient) {
  Symbol x = Symbol::Variable("data");
  Symbol net = Op("SoftmaxOutput", {}, {Op("FullyConnected", {{"num_hidden", "4"}}, {x}, "fc")}, "softmax");
  auto exec = Bind(net, {{"data", Shape{3, 5}}});
  std::mt19937 rng(3);
  for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
  NDArray label = exec->arg_dict()["softmax_label"];
  const std::vector<float> labels = {0, 3, 1};
  ASSERT_THAT(label.SyncCopyFromCPU(labels.data(), 3), IsOk());
  const auto loss = [&] {
    TESSERA_CHECK(exec->Forward(true).ok());
    const std::vector<float> p = Values(exec->outputs()[0]);
    double l = 0;
    for (int r = 0; r < 3; ++r) l -= std::log(p[r * 4 + static_cast<int>(labels[r])]);
    return l;
  };
  loss();
  ASSERT_THAT(exec->Backward(), IsOk());
  NDArray w = exec->arg_dict()["fc_weight"];
  const std::vector<float> grad = Values(exec->grad_dict()["fc_weight"]);
  std::vector<float> values = Values(w);
  for (size_t i = 0; i < values.size(); i += 3) {
    const float original = values[i], eps = 5e-3f;
    values[i] = original + eps;
    ASSERT_THAT(w.SyncCopyFromCPU(values.data(), w.Size()), IsOk());
    const double up = loss();
    values[i] = original - eps;
    ASSERT_THAT(w.SyncCopyFromCPU(values.data(), w.Size()), IsOk());
    const double down = loss();
    values[i] = original;
    ASSERT_THAT(w.SyncCopyFromCPU(values.data(), w.Size()), IsOk());
    EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-2) << i;
  }
}

TEST_F(ExecutorTest, BlockGradStopsGradients) {
  Symbol x = Symbol::Variable("data");
  Symbol kept = Op("FullyConnected", {{"num_hidden", "3"}}, {x}, "kept");
  Symbol blocked = Op("BlockGrad", {}, {Op("FullyConnected", {{"num_hidden", "3"}}, {x}, "blocked")});
  Symbol net = Op("elemwise_add", {}, {kept, blocked});
  auto exec = Bind(net, {{"data", Shape{2, 4}}});
  std::mt19937 rng(5);
  for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
  for (const NDArray& g : exec->grad_arrays()) SetRandom(g, &rng);  // must be overwritten
  ASSERT_THAT(exec->Forward(true), IsOk());
  ASSERT_THAT(exec->Backward(), IsOk());
  for (const char* name : {"blocked_weight", "blocked_bias"}) {
    for (float v : Values(exec->grad_dict()[name])) EXPECT_EQ(v, 0.0f) << name;
  }
  // head grads are ones: d/d kept_bias = batch size.
  for (float v : Values(exec->grad_dict()["kept_bias"])) EXPECT_FLOAT_EQ(v, 2.0f);
  for (const ExecNode& n : exec->exec_graph().nodes) {
    EXPECT_NE(n.name, "blocked_backward") << "a blocked branch runs no Backward";
  }
  // data's value reaches the output through the blocked branch too, so only the parameters
  // of the kept branch have the finite-difference gradient.
  CheckGradients(net, {{"data", Shape{2, 4}}}, {"blocked_weight", "blocked_bias", "data"});
}

TEST_F(ExecutorTest, GradReqAddAccumulatesAndNullComputesNothing) {
  Symbol x = Symbol::Variable("data");
  Symbol net = Op("FullyConnected", {{"num_hidden", "3"}}, {Op("Activation", {{"act_type", "tanh"}}, {x})}, "fc");
  auto write = Bind(net, {{"data", Shape{2, 4}}});
  SimpleBindOptions add_options{.shapes = {{"data", Shape{2, 4}}}, .grad_req = OpReqType::kAddTo,
                                .grad_req_by_name = {{"fc_bias", OpReqType::kNullOp}}};
  auto add = Executor::SimpleBind(rt(), net, Context::CPU(), add_options);
  ASSERT_THAT(add.status(), IsOk());
  std::mt19937 rng(9);
  for (size_t i = 0; i < write->arg_arrays().size(); ++i) {
    SetRandom(write->arg_arrays()[i], &rng);
    NDArray dst = (*add)->arg_arrays()[i];
    ASSERT_THAT(CopyFromTo(write->arg_arrays()[i], dst), IsOk());
  }
  ASSERT_THAT(write->Forward(true), IsOk());
  ASSERT_THAT(write->Backward(), IsOk());
  for (int round = 0; round < 2; ++round) {
    ASSERT_THAT((*add)->Forward(true), IsOk());
    ASSERT_THAT((*add)->Backward(), IsOk());
  }
  for (const char* name : {"data", "fc_weight"}) {
    const std::vector<float> once = Values(write->grad_dict()[name]), twice = Values((*add)->grad_dict()[name]);
    for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-5) << name << i;
  }
  EXPECT_FALSE((*add)->grad_dict().contains("fc_bias"));
  EXPECT_EQ((*add)->exec_graph().gradient_entries[2], kNoEntry);  // fc_bias
}

TEST_F(ExecutorTest, PoisoningReleasedValuesChangesNothing) {
  // If the plan let a live value share storage with a dead one, the NaN written into the
  // dead one would show up in the outputs or gradients.
  for (bool lenet : {false, true}) {
    auto net = lenet ? examples::LeNet() : examples::Mlp(20, 32);
    ASSERT_THAT(net.status(), IsOk());
    const std::map<std::string, Shape> shapes = {{"data", lenet ? Shape{2, 1, 28, 28} : Shape{4, 50}}};
    auto plain = Bind(*net, shapes, OpReqType::kWriteTo, {.memory = {.reuse = false, .inplace = false}});
    auto poisoned = Bind(*net, shapes, OpReqType::kWriteTo, {.poison_released = true});
    EXPECT_EQ(ValidatePlan(poisoned->exec_graph(), poisoned->memory_plan()), "");
    EXPECT_LT(poisoned->memory_plan().ratio(), 0.5);
    std::mt19937 rng(11);
    for (size_t i = 0; i < plain->arg_arrays().size(); ++i) {
      SetRandom(plain->arg_arrays()[i], &rng, 0.3f);
      NDArray dst = poisoned->arg_arrays()[i];
      ASSERT_THAT(CopyFromTo(plain->arg_arrays()[i], dst), IsOk());
    }
    for (int round = 0; round < 2; ++round) {
      for (Executor* e : {plain.get(), poisoned.get()}) {
        ASSERT_THAT(e->Forward(true), IsOk());
        ASSERT_THAT(e->Backward(), IsOk());
      }
    }
    const std::vector<float> a = Values(plain->outputs()[0]), b = Values(poisoned->outputs()[0]);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
    for (size_t g = 0; g < plain->grad_arrays().size(); ++g) {
      const std::vector<float> ga = Values(plain->grad_arrays()[g]), gb = Values(poisoned->grad_arrays()[g]);
      for (size_t i = 0; i < ga.size(); ++i) {
        ASSERT_FALSE(std::isnan(gb[i]));
        ASSERT_NEAR(ga[i], gb[i], 1e-5 * std::max(1.0f, std::abs(ga[i]))) << "grad " << g << "[" << i << "]";
      }
    }
  }
}

TEST_F(ExecutorTest, ReshapeSharesParametersAndRejectsParameterChanges) {
  auto net = examples::Mlp(1, 8, 3);
  ASSERT_THAT(net.status(), IsOk());
  auto exec = Bind(*net, {{"data", Shape{4, 6}}});
  std::mt19937 rng(13);
  for (const NDArray& a : exec->arg_arrays()) SetRandom(a, &rng);
  ASSERT_THAT(exec->Forward(false), IsOk());
  const std::vector<float> big = Values(exec->outputs()[0]);

  // The label follows the batch size too: it must be named, or partial shaping allowed.
  EXPECT_THAT(exec->Reshape({{"data", Shape{2, 6}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'softmax_label'")));
  auto small = exec->Reshape({{"data", Shape{2, 6}}}, /*partial_shaping=*/true);
  ASSERT_THAT(small.status(), IsOk());
  ASSERT_THAT(exec->Reshape({{"data", Shape{2, 6}}, {"softmax_label", Shape{2}}}).status(), IsOk());
  EXPECT_EQ((*small)->arg_dict()["fc1_weight"].var(), exec->arg_dict()["fc1_weight"].var());
  EXPECT_EQ((*small)->arg_dict()["softmax_label"].shape(), (Shape{2}));
  auto rows = exec->arg_dict()["data"].Slice(0, 2);
  ASSERT_THAT(rows.status(), IsOk());
  NDArray dst = (*small)->arg_dict()["data"];
  ASSERT_THAT(CopyFromTo(*rows, dst), IsOk());
  ASSERT_THAT((*small)->Forward(false), IsOk());
  const std::vector<float> got = Values((*small)->outputs()[0]);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], big[i], 1e-6);

  EXPECT_THAT(exec->Reshape({{"data", Shape{4, 7}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc1_weight' would change shape")));
}

TEST_F(ExecutorTest, DeviceGroupsInsertCopiesAndComputeTheSame) {
  Symbol x = Symbol::Variable("data");
  auto fc1 = Symbol::Create("FullyConnected", {{"num_hidden", "5"}}, {x}, "fc1", {{"ctx_group", "stage1"}});
  ASSERT_THAT(fc1.status(), IsOk());
  auto act = Symbol::Create("Activation", {{"act_type", "tanh"}}, {*fc1}, "act", {{"ctx_group", "stage2"}});
  ASSERT_THAT(act.status(), IsOk());
  Symbol net = Op("FullyConnected", {{"num_hidden", "2"}}, {*act}, "fc2");
  auto split = Bind(net, {{"data", Shape{3, 4}}}, OpReqType::kWriteTo,
                    {.group2ctx = {{"stage1", Context::CPU(0)}, {"stage2", Context::CPU(1)}}});
  int copies = 0;
  for (const ExecNode& n : split->exec_graph().nodes) copies += n.kind == ExecNodeKind::kCopy;
  EXPECT_GE(copies, 2);  // into stage2 and back, in both passes
  CheckGradients(net, {{"data", Shape{3, 4}}});  // the single-device reference
  auto single = Bind(net, {{"data", Shape{3, 4}}});
  std::mt19937 rng(17);
  for (size_t i = 0; i < single->arg_arrays().size(); ++i) {
    SetRandom(single->arg_arrays()[i], &rng);
    NDArray dst = split->arg_arrays()[i];
    ASSERT_THAT(CopyFromTo(single->arg_arrays()[i], dst), IsOk());
  }
  for (Executor* e : {single.get(), split.get()}) {
    ASSERT_THAT(e->Forward(true), IsOk());
    ASSERT_THAT(e->Backward(), IsOk());
  }
  EXPECT_EQ(Values(single->outputs()[0]), Values(split->outputs()[0]));
  EXPECT_EQ(Values(single->grad_dict()["fc1_weight"]), Values(split->grad_dict()["fc1_weight"]));
}

TEST_F(ExecutorTest, BindErrorsNameTheArgument) {
  auto net = examples::Mlp(1, 8, 3);
  ASSERT_THAT(net.status(), IsOk());
  auto zeros = [&](const Shape& s) -> NDArray {
    auto a = tessera::Zeros(rt(), s);
    TESSERA_CHECK(a.ok());
    return *a;
  };
  EXPECT_THAT(Executor::Bind(rt(), *net, Context::CPU(), {zeros({4, 6})}, {}, {}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 6 arguments")));
  std::vector<NDArray> args = {zeros({4, 6}), zeros({8, 5}), zeros({8}), zeros({3, 8}), zeros({3}), zeros({4})};
  EXPECT_THAT(Executor::Bind(rt(), *net, Context::CPU(), args, {}, {}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("'fc1'"), HasSubstr("(8,6)"), HasSubstr("(8,5)"))));
  args[1] = zeros({8, 6});
  std::vector<NDArray> grads(6);
  std::vector<OpReqType> reqs(6, OpReqType::kNullOp);
  reqs[1] = OpReqType::kWriteTo;
  EXPECT_THAT(Executor::Bind(rt(), *net, Context::CPU(), args, grads, reqs, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gradient of 'fc1_weight'")));
  grads[1] = zeros({8, 6});
  auto exec = Executor::Bind(rt(), *net, Context::CPU(), args, grads, reqs, {});
  ASSERT_THAT(exec.status(), IsOk());
  EXPECT_THAT((*exec)->Backward(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Forward")));
  ASSERT_THAT((*exec)->Forward(true), IsOk());
  EXPECT_THAT((*exec)->Backward({zeros({4, 2})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("softmax_output")));
  EXPECT_THAT((*exec)->Backward(), IsOk());
  auto no_grad = Executor::Bind(rt(), *net, Context::CPU(), args, {}, {}, {});
  ASSERT_THAT(no_grad.status(), IsOk());
  EXPECT_THAT((*no_grad)->Backward(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Executor::SimpleBind(rt(), *net, Context::CPU(), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data")));
}

// Two executors on one runtime do not queue on each other's scratch buffer: executor A's
// forward waits for an input that an unfinished function (a stand-in for a dist_sync pull)
// holds, and executor B's forward, pushed after it, still completes. With one temp-space
// variable shared by both, B's FullyConnected queued behind A's and two dist_sync workers in
// one process deadlocked.
TEST_F(ExecutorTest, ExecutorsDoNotWaitOnEachOthersScratchSpace) {
  const Symbol net = Op("FullyConnected", {{"num_hidden", "3"}}, {Symbol::Variable("x")}, "fc");
  auto a = Bind(net, {{"x", Shape{2, 4}}});
  auto b = Bind(net, {{"x", Shape{2, 4}}});
  std::promise<engine::CallbackOnComplete> blocked;
  ASSERT_THAT(rt().engine->PushAsync(
                  [&blocked](engine::RunContext, engine::CallbackOnComplete done) {
                    blocked.set_value(std::move(done));  // completed by the test, later
                  },
                  Context::CPU(), {}, {a->arg_dict().at("x").var()}, engine::FnProperty::kNormal,
                  0, "held_input"),
              IsOk());
  engine::CallbackOnComplete finish_blocker = blocked.get_future().get();
  ASSERT_THAT(a->Forward(/*is_train=*/false), IsOk());
  ASSERT_THAT(b->Forward(/*is_train=*/false), IsOk());
  auto b_done = std::async(std::launch::async, [&] { return b->outputs()[0].WaitToRead(); });
  const bool b_finished = b_done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  finish_blocker(absl::OkStatus());  // lets A run (and B, had it been stuck behind A)
  EXPECT_TRUE(b_finished) << "executor B waited for executor A's held input";
  EXPECT_THAT(b_done.get(), IsOk());
  EXPECT_THAT(a->outputs()[0].WaitToRead(), IsOk());
}

}  // namespace
}  // namespace tessera::graph
