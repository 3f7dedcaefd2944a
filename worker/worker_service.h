// WorkerServiceImpl: the gRPC Worker service (proto/worker.proto) over a JobManager, on the
// callback API. RunJob streams the job's events as they come and ends with the job's status;
// a client that goes away cancels its job.
//
// Thread safety: gRPC calls in from its threads; JobManager serializes.
#ifndef TESSERA_WORKER_WORKER_SERVICE_H_
#define TESSERA_WORKER_WORKER_SERVICE_H_

#include "proto/worker.grpc.pb.h"
#include "worker/job_manager.h"

namespace tessera::worker {

class WorkerServiceImpl final : public Worker::CallbackService {
 public:
  // `jobs` (not owned) outlives the service.
  explicit WorkerServiceImpl(JobManager* jobs) : jobs_(jobs) {}

  grpc::ServerWriteReactor<JobEvent>* RunJob(grpc::CallbackServerContext* context,
                                             const JobSpec* spec) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const GetStatusRequest* request, WorkerStatus* reply) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const CancelRequest* request, CancelReply* reply) override;
  grpc::ServerUnaryReactor* GetParams(grpc::CallbackServerContext* context,
                                      const GetParamsRequest* request, GetParamsReply* reply) override;

 private:
  JobManager* const jobs_;  // not owned
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_WORKER_SERVICE_H_
