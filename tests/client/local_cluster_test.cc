// SplitCpus: how LocalCluster pins workers to shares of the CPUs.
#include "client/local_cluster.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::client {
namespace {

using ::testing::ElementsAre;

TEST(SplitCpusTest, ContiguousNearlyEqualRuns) {
  EXPECT_THAT(SplitCpus({0, 1, 2, 3}, 2), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(SplitCpus({0, 1, 2, 3, 4}, 2), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3, 4)));
  EXPECT_THAT(SplitCpus({2, 5, 7}, 1), ElementsAre(ElementsAre(2, 5, 7)));
}

TEST(SplitCpusTest, MoreWorkersThanCpusShareThemInTurn) {
  EXPECT_THAT(SplitCpus({4, 6}, 5), ElementsAre(ElementsAre(4), ElementsAre(6), ElementsAre(4),
                                                ElementsAre(6), ElementsAre(4)));
  EXPECT_THAT(SplitCpus({}, 2), ElementsAre(ElementsAre(), ElementsAre()));
}

}  // namespace
}  // namespace tessera::client
