// bench/cluster_sim.py's short version: two workers and one server on hosts of their own,
// links shaped to 100 Mbit/s each way (10 Gbps scaled down 100 times), ResNet-50's
// parameters. The links are the limit - no round beats the analytical bound, which an
// unshaped link would by several times - every worker sends its model once per round, and
// the server's link carries both workers' copies. A failing run (a model that does not
// exist) names what failed, and every simulated host is gone after either run. Lossy links
// are recovered by TCP; a link's latency lengthens every round. With PyTorch at hand, its
// gloo allreduce runs on the same links as the peer.
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/command.h"
#include "tests/integration/local_cluster.h"

namespace tessera::integration {
namespace {

using ::testing::HasSubstr;

// The namespaces bench/cluster_sim.py makes ("tcs<pid>-..."), left behind.
std::vector<std::string> LeftNamespaces() {
  const Command list = RunCommand({"ip", "netns", "list"});
  std::vector<std::string> left;
  for (const std::string& line : list.lines) {
    if (absl::StartsWith(line, "tcs")) left.push_back(line);
  }
  return left;
}

Command ClusterSim(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {"/usr/bin/python3", RunfilePath("bench/cluster_sim.py"),
                                   "--tessera", RunfilePath("client/tessera"), "--workers", "2",
                                   "--servers", "1", "--gbps", "10", "--scale_down", "100",
                                   "--rounds", "2", "--peer", "none", "--work_dir",
                                   ::testing::TempDir() + "/sim"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunCommand(argv);
}

class ClusterSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces and tc)";
  }
};

TEST_F(ClusterSimTest, ShapedLinksLimitTheRoundsAndCarryTheModel) {
  const Command c = ClusterSim({"--models", "resnet50"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  ASSERT_FALSE(c.lines.empty()) << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_EQ(row["keys"], 161);
  EXPECT_DOUBLE_EQ(row["link_mbit_simulated"].get<double>(), 100.0);
  // 25,557,032 floats over 100, 161 keys of at least one element each.
  EXPECT_NEAR(row["model_bytes_scaled"].get<double>(), 1022052, 1000);
  // Physics: a round cannot move its bytes faster than the links do (5% for tbf's bucket).
  EXPECT_LE(row["ratio_to_bound"].get<double>(), 1.05) << row.dump();
  EXPECT_GT(row["ratio_to_bound"].get<double>(), 0) << row.dump();
  // Each worker sends its model once per round, plus headers (TCP/IP, TLS, gRPC, the
  // requests of each key), and receives it once.
  for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
    EXPECT_GE(link["sent"].get<double>(), 1022052) << row.dump();
    EXPECT_LE(link["sent"].get<double>(), 1.25 * 1022052) << row.dump();
    EXPECT_GE(link["received"].get<double>(), 1022052) << row.dump();
  }
  // The one server's link carries both workers' models each way.
  EXPECT_GE(row["busiest_server_link_vs_ideal"].get<double>(), 1.0) << row.dump();
  EXPECT_LE(row["busiest_server_link_vs_ideal"].get<double>(), 1.25) << row.dump();
  EXPECT_EQ(report["machine"]["cpus"].get<int>() > 0, true);
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

// Each server on a worker's host (--colocate): a host's link carries its worker's pushes but
// the half its own server takes, and its server's values for the other worker - one model
// each way with two of each - and no round beats that.
TEST_F(ClusterSimTest, AColocatedServerSharesItsWorkersLink) {
  const Command c = ClusterSim({"--models", "resnet50", "--servers", "2", "--colocate"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_TRUE(row["colocated"].get<bool>());
  EXPECT_LE(row["ratio_to_bound"].get<double>(), 1.05) << row.dump();
  ASSERT_EQ(row["worker_link_bytes_per_round"].size(), 2u) << row.dump();
  for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
    EXPECT_GE(link["sent"].get<double>(), 1022052) << row.dump();
    EXPECT_LE(link["sent"].get<double>(), 1.25 * 1022052) << row.dump();
  }
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

// Compressed both ways (2bit pushes, bfloat16 pulls): each worker's link sends a sixteenth
// of the model (plus headers and the acknowledgements of what it receives) and receives half
// of it; the server's link the same for both workers. The row says what the codecs would add
// at full size.
TEST_F(ClusterSimTest, CompressedTransfersCarryTheirShareOfTheModel) {
  const Command c = ClusterSim({"--models", "resnet50", "--compression", "2bit/bf16"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_EQ(row["compression"], "2bit/bf16");
  constexpr double kModel = 1022052;
  for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
    EXPECT_GE(link["sent"].get<double>(), kModel / 16) << row.dump();
    EXPECT_LE(link["sent"].get<double>(), 0.15 * kModel) << row.dump();
    EXPECT_GE(link["received"].get<double>(), kModel / 2) << row.dump();
    EXPECT_LE(link["received"].get<double>(), 0.6 * kModel) << row.dump();
  }
  const nlohmann::json& server = row["server_link_bytes_per_round"][0];
  EXPECT_GE(server["sent"].get<double>(), kModel) << row.dump();  // half the model to each worker
  EXPECT_LE(server["sent"].get<double>(), 1.2 * kModel) << row.dump();
  // The codecs' full-size time, timed on this machine, and the rate with all of what the
  // scale-down took off them added back: below the measured one.
  EXPECT_GT(row["full_size_codec_s"]["worker"].get<double>(), 0) << row.dump();
  EXPECT_GT(row["full_size_codec_s"]["server"].get<double>(), 0) << row.dump();
  EXPECT_LT(row["rounds_per_s_full_size_codec_worst"].get<double>(),
            row["rounds_per_s"].get<double>())
      << row.dump();
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

// Random loss (a BPF classifier on each side of every link, no netem needed): 2% of the
// packets dropped - at some 700 segments a round each way per worker, none lost has odds
// below 1e-6 - and TCP sends them again: the rounds complete, every worker still delivers its
// model, and the hosts count the segments they sent again.
TEST_F(ClusterSimTest, LossyLinksAreRecoveredByTcpAndCounted) {
  const Command c = ClusterSim({"--models", "resnet50", "--loss", "2"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  EXPECT_DOUBLE_EQ(report["loss_percent"].get<double>(), 2.0);
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_GT(row["retransmitted_segments_per_round"].get<double>(), 0) << row.dump();
  EXPECT_LE(row["ratio_to_bound"].get<double>(), 1.05) << row.dump();
  for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
    EXPECT_GE(link["sent"].get<double>(), 1022052) << row.dump();
  }
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

// A latency of 20 ms each way on every link (a delay line in user space, no netem needed):
// a round is at least its bytes over the links plus one request and its answer across two
// links each way (80 ms) - the bound with the latency added, which a round through links
// without it would beat by a fifth - and the bytes are still one model each way.
TEST_F(ClusterSimTest, ALinksLatencyDelaysEveryRound) {
  // Buffers for the round trip (64 MiB full size, 671 KB scaled), or each connection moves
  // a 41 KB window per 80 ms and a round takes seconds.
  const Command c = ClusterSim(
      {"--models", "resnet50", "--latency_us", "20000", "--socket_buffer_mb", "64"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  EXPECT_EQ(report["latency_us"], nlohmann::json::array({20000}));
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_EQ(row["latency_us"].get<int>(), 20000);
  // Both workers' models through the server's link each way: 2 x 1,022,052 bytes at 100 Mbit/s.
  const double links = 2 * 1022052 * 8 / 100e6;
  EXPECT_NEAR(row["bound_round_s"].get<double>(), links + 0.08, 1e-3) << row.dump();
  EXPECT_LE(row["ratio_to_bound"].get<double>(), 1.05) << row.dump();
  for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
    EXPECT_GE(link["sent"].get<double>(), 1022052) << row.dump();
    EXPECT_LE(link["sent"].get<double>(), 1.25 * 1022052) << row.dump();
  }
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
  // A delay line left running would keep its namespace alive, unnamed.
  EXPECT_NE(RunCommand({"pgrep", "-f", "tools/sim_delay_line"}).code, 0);
}

// The layered schedule (a training step's forward and backward layer by layer, each push
// issued as its gradient is made) at both priority orders: no round beats the compute (its
// sleeps) or the links, the exchange alone no faster than the links, and the bytes per round
// are still one model each way (the exchange-alone rounds counted apart).
TEST_F(ClusterSimTest, ALayeredRoundNeverBeatsItsComputeOrItsLinks) {
  const Command c = ClusterSim({"--models", "resnet50", "--schedule", "layered", "--compute_ms",
                                "300", "--priority", "forward,backward"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  ASSERT_EQ(report["rows"].size(), 2u) << report.dump();
  EXPECT_EQ(report["rows"][0]["priority"], "forward");
  EXPECT_EQ(report["rows"][1]["priority"], "backward");
  for (const nlohmann::json& row : report["rows"]) {
    EXPECT_EQ(row["schedule"], "layered");
    const double round = 1 / row["rounds_per_s"].get<double>();
    const double links = row["bound_round_s"].get<double>() - 0.3;  // the serial bound's links
    EXPECT_DOUBLE_EQ(row["overlap_bound_round_s"].get<double>(), std::max(0.3, links));
    EXPECT_GE(round, 0.95 * row["overlap_bound_round_s"].get<double>()) << row.dump();
    EXPECT_GE(row["exchange_s"].get<double>(), 0.95 * links) << row.dump();
    EXPECT_GE(row["hidden_fraction"].get<double>(), 0.0) << row.dump();
    EXPECT_LE(row["hidden_fraction"].get<double>(), 1.0) << row.dump();
    for (const nlohmann::json& link : row["worker_link_bytes_per_round"]) {
      EXPECT_GE(link["sent"].get<double>(), 1022052) << row.dump();
      EXPECT_LE(link["sent"].get<double>(), 1.25 * 1022052) << row.dump();
    }
  }
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

// The peer: PyTorch's gloo allreduce of the same parameters on the same links, also held to
// its (ring's) bound; each parameter-server row says how it compares.
TEST_F(ClusterSimTest, TheAllreducePeerRunsOnTheSameLinks) {
  if (RunCommand({"/usr/bin/python3", "-c", "import torch.distributed"}).code != 0) {
    GTEST_SKIP() << "needs python3-torch (./tessera bench cluster_sim installs it)";
  }
  const Command c = ClusterSim({"--models", "resnet50", "--peer", "gloo"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  ASSERT_EQ(report["peer_rows"].size(), 1u) << report.dump();
  const nlohmann::json& peer = report["peer_rows"][0];
  EXPECT_THAT(peer["peer"].get<std::string>(), HasSubstr("gloo allreduce"));
  EXPECT_LE(peer["ratio_to_bound"].get<double>(), 1.05) << peer.dump();
  // A ring of two sends each worker's model once: 2 (W - 1) / W = 1.
  EXPECT_GE(peer["worker_sent_vs_model"].get<double>(), 1.0) << peer.dump();
  const nlohmann::json& row = report["rows"][0];
  EXPECT_DOUBLE_EQ(row["vs_gloo"].get<double>(),
                   row["rounds_per_s"].get<double>() / peer["rounds_per_s"].get<double>());
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

TEST_F(ClusterSimTest, AFailedRunSaysWhatFailedAndLeavesNoHostBehind) {
  const Command c = ClusterSim({"--models", "resnet51"});
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.err, HasSubstr("--model=resnet51: not resnet50, vgg16 or embedding_mlp"));
  EXPECT_THAT(LeftNamespaces(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace tessera::integration
