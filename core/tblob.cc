#include "core/tblob.h"

namespace tessera {

const char* OpReqTypeName(OpReqType req) {
  switch (req) {
    case OpReqType::kNullOp:
      return "null";
    case OpReqType::kWriteTo:
      return "write";
    case OpReqType::kWriteInplace:
      return "inplace";
    case OpReqType::kAddTo:
      return "add";
  }
  return "unknown";
}

}  // namespace tessera
