// Job files: a training job written as YAML, read into the JobSpec that `tessera train`
// submits to the workers (proto/worker.proto) plus what the launcher itself needs (cluster
// size, run folder). The parser checks everything it can before a cluster starts: unknown
// keys, types, ranges, and the names of the model, optimizer and its parameters, metric,
// initializer, KVStore type, devices and data iterator arguments. Pure functions of their
// input (LoadJobFile and network.symbol_file read files); thread-safe.
//
// The schema (every key but network, data, batch_size and epochs is optional; defaults
// after '='):
//
//   name: lenet-mnist       # = the file name without .yaml/.yml ("job" when there is none).
//                           #   Letters, digits, '.', '_', '-': it names the run folder and
//                           #   the checkpoints.
//   network:                # exactly one of:
//     model: lenet          #   a built-in network (examples/models.h): mlp (784-128-64-10,
//                           #   ReLU; wants data.flat: true) | lenet (for 1x28x28 images)
//     symbol_file: x.json   #   MXNet symbol JSON; its text goes into JobSpec.symbol_json.
//                           #   Input "data", label "softmax_label".
//     params: r-0010.params #   = none: start from these parameters instead of the
//                           #   initializer (fine-tuning): MXNet's .params (a checkpoint's
//                           #   arg:/aux: names, or Gluon's plain ones) or a Tessera array
//                           #   file; a path the workers read, under their data root
//     allow_missing: false  #   = false: network parameters the file lacks get the
//                           #   initializer (else they are an error naming them)
//     allow_extra: false    #   = false: arrays the network lacks are ignored (else an error)
//     fixed_param_names: [conv1_weight]
//                           #   = []: parameters not trained (MXNet Module's)
//   data:
//     kind: mnist           # = mnist; mnist | csv | imagerecord
//     dir: .cache/mnist     # a folder holding the IDX files tools/fetch_mnist.py writes:
//                           #   train-images-idx3-ubyte, train-labels-idx1-ubyte,
//                           #   t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte.
//     # ...or, instead of dir, the files themselves (test_* optional, both or neither):
//     # train_images: a  train_labels: b  test_images: c  test_labels: d
//     flat: false           # = false; true: rows of 784 values (MLPs), false: 1x28x28 images
//     shuffle: true         # = true; reshuffled every epoch from seed and epoch
//     # kind csv / imagerecord: MXNet's CSVIter / ImageRecordIter (io/create_data_iter.h)
//     # with these arguments in MXNet's names, instead of dir ... flat:
//     #   train: {path_imgrec: train.rec, data_shape: [1, 28, 28], scale: 0.00392156862745098}
//     #   test: {path_imgrec: test.rec, data_shape: [1, 28, 28], scale: 0.00392156862745098}
//     # train is required (csv: data_csv and data_shape; imagerecord: path_imgrec and
//     # data_shape), test optional. Values are kept as written, a list [1, 28, 28] becomes
//     # "(1,28,28)"; path_imgrec, path_imgidx, data_csv and label_csv are paths. The job sets
//     # batch_size, seed, shuffle (data.shuffle), part_index and num_parts itself, and the
//     # test iterator's last_batch_handle (pad: every test sample counts once); giving them
//     # is an error. Each argument is checked by the iterator here.
//   batch_size: 64          # per worker, >= 1
//   epochs: 5               # >= 1
//   optimizer:              # = {name: sgd, params: {learning_rate: 0.01}}
//     name: sgd             # = sgd; sgd | adam | rmsprop | adagrad
//     params: {learning_rate: 0.05, momentum: 0.9}
//                           # = {} (the optimizer's defaults, kvstore/optimizer.h). Values are
//                           #   kept as the YAML text wrote them ("1e-3" stays "1e-3").
//   # optimizer: adam       #   a plain name is short for {name: adam}
//   initializer: xavier     # = xavier; xavier | uniform | normal
//   eval_metric: acc        # = acc; acc | ce | mse | top_k_accuracy_K, or a list: [acc, ce]
//   kvstore: dist_sync      # = dist_sync with cluster.workers > 1, else local;
//                           #   local | dist_sync | dist_async (local needs workers: 1)
//   cluster: {workers: 2, servers: 1}
//                           # = {workers: 2, servers: 1}: the processes `tessera train` starts
//                           #   (servers >= 1 for the dist KVStores); replicas: 1 | 2, the
//                           #   copies of each server's keys (= 2 with servers >= 2: each
//                           #   server's keys also on the next, docs/replication.md)
//   devices: [cpu(0)]       # = [cpu(0)]; per worker: cpu(N) | gpu(N), or one string
//   seed: 0                 # = 0; initialization and shuffling
//   checkpoint: true        # = true: NAME-NNNN.params/.states after every epoch and
//                           #   NAME-symbol.json, as <run_dir>/<name>, and complete
//                           #   checkpoints (resumable: tessera train --resume) in
//                           #   <run_dir>/<name>-checkpoints/ after every epoch; or
//                           #   {every_batches: N, every_seconds: T, keep: K} for more
//                           #   often (keep = 3 newest)
//   recovery: {max_restarts: 3, wait_seconds: 120}
//                           # = these; after a lost process (a daemon killed), the job runs
//                           #   again from its newest checkpoint once every daemon answers
//                           #   (max_restarts 0: never)
//   checkpoint_format: tessera
//                           # = tessera; tessera | mxnet (parameter files MXNet's
//                           #   mx.nd.load and Module.load read)
//   run_dir: runs/lenet-mnist
//                           # = runs/<name>: logs, metrics.csv, plot.svg, checkpoints
//
// Relative paths in data, network.symbol_file and network.params are relative to the job
// file's folder (`base_dir`), so a job file works from any working directory; run_dir is
// relative to the working directory of `tessera train` (where results are wanted), and is
// not created here.
//
// Errors: INVALID_ARGUMENT "FILE:LINE: FIELD.PATH: what is wrong" for a bad value, an unknown
// key (with the known ones) or a duplicate key, "FILE: FIELD: required" for a missing one,
// "FILE:LINE:COL: ..." for YAML syntax; NOT_FOUND naming the field and path for a
// symbol_file that cannot be read, and the path for a job file LoadJobFile cannot read.
#ifndef TESSERA_CLIENT_JOB_FILE_H_
#define TESSERA_CLIENT_JOB_FILE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/worker.pb.h"

namespace tessera::client {

struct JobFile {
  // Everything that goes to the workers. Left for the launcher: rank, num_workers, ps_hosts,
  // data.part_index / data.num_parts and batch_event_every.
  JobSpec spec;
  int num_workers = 2;  // cluster size for `tessera train`'s embedded cluster
  int num_servers = 1;
  int replicas = 1;  // copies of each server's keys: 2 by default with two servers or more
  // Where logs, metrics.csv, plot.svg and checkpoints go, as written (default "runs/<name>").
  std::string run_dir;
};

// The cluster a launcher asks for (`tessera launch -n W -s S`): it replaces the file's
// `cluster` before anything is checked against it (the default kvstore, a dist kvstore's
// servers), as MXNet's launch.py -n / -s do.
struct ClusterOverride {
  std::optional<int> workers;
  std::optional<int> servers;
};

// Parses YAML text. `base_dir` resolves relative paths in the file (data files, a symbol
// JSON file); empty leaves them relative. `file_name_for_errors` starts every message and
// gives the default name.
absl::StatusOr<JobFile> ParseJobFile(const std::string& yaml_text, const std::string& base_dir,
                                     const std::string& file_name_for_errors,
                                     const ClusterOverride& cluster = {});

// Reads `path` and parses it with `base_dir` (empty: the file's folder, made absolute), then
// applies the checks the coordinator and the workers apply (jobs::CheckJobSpec).
absl::StatusOr<JobFile> LoadJobFile(const std::string& path, const ClusterOverride& cluster = {},
                                    const std::string& base_dir = "");

// Whether a job with this KVStore type trains on one worker without servers: every type but
// dist_sync and dist_async (local, local_update_cpu, local_allreduce_*, device, nccl).
bool IsLocalKVStore(const std::string& kvstore);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_JOB_FILE_H_
