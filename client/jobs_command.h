// The commands over a standing cluster's jobs (proto/jobs.proto), each reaching the cluster's
// coordinator (the first of --workers) with client/cluster_flags.h's flags:
//
//   jobs --workers H:P,... [--json]     the caller's jobs: id, name, owner, state, progress
//                                       (epoch/batch), samples/s, submitted, started, ended
//   attach ID --workers H:P,...         the job's epochs so far, then live; exit 0 when it
//                                       succeeded, 1 otherwise
//   wait ID --workers H:P,...           waits for the job's end; the same exit codes
//   cancel ID --workers H:P,...         takes a queued job off the queue, or stops a running
//                                       one at its next batch
//
// Stopping attach or wait (Ctrl-C) leaves the job running.
#ifndef TESSERA_CLIENT_JOBS_COMMAND_H_
#define TESSERA_CLIENT_JOBS_COMMAND_H_

namespace tessera::client {

// The command lines above (argv[1] is the command); returns the process exit code.
int JobsMain(int argc, char** argv);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_JOBS_COMMAND_H_
