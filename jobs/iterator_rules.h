// The rules for a job's data iterators that both ends apply: the client when it reads a job
// file (client/job_file.h, so that a mistake fails before any daemon starts) and the worker
// when it builds the iterators (worker/job_runner.h, for jobs from any client). One table:
// the arguments the job sets itself, from its own fields and each worker's part, which a job
// must not give its iterators.
#ifndef TESSERA_JOBS_ITERATOR_RULES_H_
#define TESSERA_JOBS_ITERATOR_RULES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "io/create_data_iter.h"
#include "proto/worker.pb.h"

namespace tessera::jobs {

// The arguments the job gives the training iterator (`test` false) or the test iterator
// (`test` true) of its worker: batch_size, seed, shuffle and the worker's part; the test
// iterator reads everything, unshuffled, its last batch padded so each sample counts once.
io::IterKwargs JobSetIterArguments(const JobSpec& spec, bool test);

// Why the job may not give argument `key` to that iterator ("the job sets it (...)"), or
// nothing when it may.
std::optional<std::string> JobSetsIterArgument(absl::string_view key, bool test);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_ITERATOR_RULES_H_
