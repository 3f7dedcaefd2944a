// JobsServiceImpl: the gRPC Jobs service (proto/jobs.proto) over a Coordinator, on the
// callback API. Each call acts for the owner of its cluster token (rpc/token_auth.h). Attach
// streams what the coordinator hands its listener, in order, and ends OK after the record.
//
// Thread safety: gRPC calls in from its threads; the Coordinator serializes.
#ifndef TESSERA_JOBS_JOBS_SERVICE_H_
#define TESSERA_JOBS_JOBS_SERVICE_H_

#include "jobs/coordinator.h"
#include "proto/jobs.grpc.pb.h"

namespace tessera::jobs {

class JobsServiceImpl final : public Jobs::CallbackService {
 public:
  // `coordinator` (not owned) outlives the service and every call it serves: stop the server
  // before destroying it.
  explicit JobsServiceImpl(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const SubmitJobRequest* request, JobRecord* reply) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const ListJobsRequest* request, ListJobsReply* reply) override;
  grpc::ServerWriteReactor<JobUpdate>* Attach(grpc::CallbackServerContext* context,
                                              const AttachRequest* request) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const CancelJobRequest* request, JobRecord* reply) override;

 private:
  Coordinator* const coordinator_;  // not owned
};

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_JOBS_SERVICE_H_
