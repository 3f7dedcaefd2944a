// OprBlockPool: recycles OprBlocks so a push costs no malloc.
//
// Blocks are allocated by pushing threads and freed by workers, the pattern general-purpose
// allocators handle worst (every free is remote). Each thread keeps a small cache; full
// caches hand a batch to a shared list under a mutex and empty ones take a batch back, so
// the mutex is touched once per kBatch blocks. Blocks are plain memory with no engine
// state, so one process-wide pool serves every engine (like an allocator would).
#ifndef TESSERA_ENGINE_INTERNAL_BLOCK_POOL_H_
#define TESSERA_ENGINE_INTERNAL_BLOCK_POOL_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "engine/internal/opr.h"

namespace tessera::engine::internal {

class OprBlockPool {
 public:
  static OprBlock* New() {
    Cache& cache = LocalCache();
    if (cache.blocks.empty()) Shared().TakeBatch(&cache.blocks);
    if (cache.blocks.empty()) return new OprBlock;
    OprBlock* b = cache.blocks.back();
    cache.blocks.pop_back();
    return b;
  }

  // Resets `b` (dropping the function and what it captured) and keeps it for reuse.
  static void Delete(OprBlock* b) {
    b->Reset();
    Cache& cache = LocalCache();
    cache.blocks.push_back(b);
    if (cache.blocks.size() >= 2 * kBatch) Shared().GiveBatch(&cache.blocks);
  }

 private:
  static constexpr size_t kBatch = 128;

  struct SharedList {
    Mutex mu;
    std::vector<OprBlock*> blocks ABSL_GUARDED_BY(mu);

    void TakeBatch(std::vector<OprBlock*>* out) {
      MutexLock guard(&mu);
      size_t n = std::min(kBatch, blocks.size());
      out->insert(out->end(), blocks.end() - n, blocks.end());
      blocks.resize(blocks.size() - n);
    }
    void GiveBatch(std::vector<OprBlock*>* from) {
      MutexLock guard(&mu);
      size_t n = std::min(kBatch, from->size());
      blocks.insert(blocks.end(), from->end() - n, from->end());
      from->resize(from->size() - n);
    }
    ~SharedList() {
      for (OprBlock* b : blocks) delete b;
    }
  };

  struct Cache {
    std::vector<OprBlock*> blocks;
    ~Cache() {
      // A finished thread's blocks go back to the shared list.
      while (!blocks.empty()) Shared().GiveBatch(&blocks);
    }
  };

  static SharedList& Shared() {
    static SharedList* list = new SharedList;  // outlives every thread's cache
    return *list;
  }
  static Cache& LocalCache() {
    thread_local Cache cache;
    return cache;
  }
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_BLOCK_POOL_H_
