#include "kvstore/internal/optimizer_spec.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status_macros.h"
#include "kvstore/lr_scheduler.h"

namespace tessera::kvstore {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec) {
  ops::KwArgs params(spec.params().begin(), spec.params().end());
  std::sort(params.begin(), params.end());  // a proto map has no order
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(spec.name(), params));
  optimizer->SetLrMult(std::map<int, double>(spec.lr_mult().begin(), spec.lr_mult().end()));
  optimizer->SetWdMult(std::map<int, double>(spec.wd_mult().begin(), spec.wd_mult().end()));
  if (!spec.lr_scheduler().empty()) {
    std::vector<std::pair<std::string, std::string>> args(spec.lr_scheduler_params().begin(),
                                                          spec.lr_scheduler_params().end());
    ASSIGN_OR_RETURN(std::unique_ptr<LRScheduler> scheduler,
                     CreateLRScheduler(spec.lr_scheduler(), args));
    optimizer->SetLrScheduler(std::move(scheduler));
  }
  return optimizer;
}

}  // namespace tessera::kvstore
