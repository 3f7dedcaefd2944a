// SyncRound against a sequential oracle: random rounds of random pushes (random arrival
// order, random ranks joining instead, pieces split anywhere or in place in a slot the worker
// overwrites once acknowledged), each round's sum compared bit for bit with the sum in rank
// order, and every worker's round count with the oracle's.
#include "kvstore/internal/sync_round.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// `bytes` cut at random places (not only at float boundaries).
std::vector<std::string> Cut(const std::string& bytes, std::mt19937& rng) {
  std::vector<std::string> pieces;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::uniform_int_distribution<size_t>(1, bytes.size() - at)(rng);
    pieces.push_back(bytes.substr(at, n));
    at += n;
  }
  return pieces;
}

TEST(SyncRoundTest, SumsEveryRoundInRankOrderWhateverTheArrivalOrder) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 200; ++trial) {
    const int workers = std::uniform_int_distribution<int>(1, 6)(rng);
    const int size = std::uniform_int_distribution<int>(1, 37)(rng);
    SyncRound round(workers);
    std::vector<float> sum(size);
    std::vector<int64_t> rounds_of(workers, 0);  // the oracle's
    int64_t done = 0;
    for (int r = 0; r < 12; ++r) {
      // Who pushes (at least one) and who joins instead (every other rank, and maybe some
      // that pushed too: a worker may push, then wait in a barrier).
      std::vector<char> pushes(workers), joined(workers), joins_after_pushing(workers);
      for (int w = 0; w < workers; ++w) pushes[w] = rng() % 4 != 0;
      pushes[rng() % workers] = 1;
      for (int w = 0; w < workers; ++w) {
        joined[w] = !pushes[w];
        joins_after_pushing[w] = pushes[w] && rng() % 5 == 0;
      }
      std::vector<std::vector<float>> values(workers);
      for (int w = 0; w < workers; ++w) {
        for (int i = 0; i < size; ++i) {
          values[w].push_back(std::uniform_real_distribution<float>(-1, 1)(rng) *
                              std::pow(10.0f, static_cast<float>(rng() % 7) - 3));
        }
      }
      std::vector<int> order;
      for (int w = 0; w < workers; ++w) {
        if (pushes[w]) order.push_back(w);
      }
      std::shuffle(order.begin(), order.end(), rng);
      // The slots of in-place pushes, overwritten after each push as the worker's next
      // write would: a push that had to wait must have been copied.
      std::vector<std::vector<float>> slots(workers);
      for (size_t k = 0; k < order.size(); ++k) {
        const int w = order[k];
        EXPECT_FALSE(round.Ready(joined, sum.data())) << "before push " << k;
        ASSERT_FALSE(round.pushed(w));
        SyncRound::Payload payload;
        if (rng() % 2) {
          slots[w] = values[w];
          payload.in_place = std::string_view(reinterpret_cast<const char*>(slots[w].data()),
                                              slots[w].size() * sizeof(float));
        } else {
          payload.pieces = Cut(Bytes(values[w]), rng);
        }
        round.Accept(w, std::move(payload), sum.data());
        std::fill(slots[w].begin(), slots[w].end(), 1e30f);
        joined[w] = joins_after_pushing[w];
        EXPECT_TRUE(round.open());
        EXPECT_TRUE(round.pushed(w));
        EXPECT_EQ(round.rounds_of(w), done + 1);
      }
      ASSERT_TRUE(round.Ready(joined, sum.data())) << "trial " << trial << " round " << r;
      // The oracle: the first pusher's values, then each next one's added, in rank order.
      std::vector<float> expected;
      for (int w = 0; w < workers; ++w) {
        if (!pushes[w]) continue;
        if (expected.empty()) {
          expected = values[w];
        } else {
          for (int i = 0; i < size; ++i) expected[i] += values[w][i];
        }
      }
      ASSERT_EQ(Bytes(sum), Bytes(expected)) << "trial " << trial << " round " << r;
      for (int w = 0; w < workers; ++w) {
        if (pushes[w]) rounds_of[w] = done + 1;
      }
      if (rng() % 8 == 0) {  // the update failed
        round.Abandon();
        std::fill(rounds_of.begin(), rounds_of.end(), done);
      } else {
        round.Finish();
        ++done;
      }
      if (rng() % 4 == 0) {  // a barrier opened
        round.AlignRanks();
        std::fill(rounds_of.begin(), rounds_of.end(), done);
      }
      EXPECT_FALSE(round.open());
      EXPECT_EQ(round.rounds_done(), done);
      for (int w = 0; w < workers; ++w) {
        EXPECT_FALSE(round.pushed(w));
        EXPECT_EQ(round.rounds_of(w), rounds_of[w]) << "worker " << w;
      }
    }
  }
}

TEST(SyncRoundTest, AnEmptyRoundIsNeverReady) {
  SyncRound round(3);
  std::vector<float> sum(2);
  EXPECT_FALSE(round.Ready({1, 1, 1}, sum.data()));
  EXPECT_FALSE(round.open());
  EXPECT_EQ(round.rounds_done(), 0);
}

}  // namespace
}  // namespace tessera::kvstore
