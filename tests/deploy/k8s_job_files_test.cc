// The job files the Kubernetes manifests carry in their ConfigMaps parse as job files, with
// the data where the worker pods put it.
#include <string>

#include "client/job_file.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::client {
namespace {

using tessera::testing::IsOk;
using ::testing::ElementsAre;

TEST(K8sJobFilesTest, TheCpuJobTrainsLeNetFromTheWorkersDataRoot) {
  absl::StatusOr<JobFile> job = LoadJobFile("deploy/k8s/job/job.yaml");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_EQ(job->spec.model(), "lenet");
  EXPECT_EQ(job->spec.kvstore(), "dist_sync");
  EXPECT_EQ(job->spec.data().train_images(), "/data/mnist/train-images-idx3-ubyte");
  EXPECT_THAT(job->spec.devices(), ElementsAre("cpu(0)"));
}

TEST(K8sJobFilesTest, TheGpuJobRunsOnEachWorkersGpu) {
  absl::StatusOr<JobFile> job = LoadJobFile("deploy/k8s/overlays/gpu/job.yaml");
  ASSERT_THAT(job.status(), IsOk());
  EXPECT_THAT(job->spec.devices(), ElementsAre("gpu(0)"));
  EXPECT_EQ(job->spec.data().train_images(), "/data/mnist/train-images-idx3-ubyte");
}

}  // namespace
}  // namespace tessera::client
