// `tessera cluster -n W -s S [--run_dir DIR]`: a LocalCluster (client/local_cluster.h) held
// up for another program - the Python SDK's tessera.LocalCluster - to run jobs on.
//
// Once every daemon is up it prints one JSON line on stdout: {"workers": [...], "servers":
// [...], "token_file": ..., "run_dir": ..., "pids": [...]}. It stops the daemons and exits
// when its standard input ends (the owner closed the pipe, or died), on SIGTERM or SIGINT,
// or, with exit status 1 and a line on stderr naming it, when a daemon exits.
#ifndef TESSERA_CLIENT_CLUSTER_COMMAND_H_
#define TESSERA_CLIENT_CLUSTER_COMMAND_H_

namespace tessera::client {

int ClusterMain(int argc, char** argv);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CLUSTER_COMMAND_H_
