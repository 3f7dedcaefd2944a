// Fuzz target: the GraphDef protobuf (graph/graph_def.h), bytes as a serialized GraphDef. A
// graph that loads must convert back (ToGraphDef) and load again.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "fuzz/require.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/graph_def.h"
#include "graph/symbol.h"
#include "proto/graph.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  GraphDef graph_def;
  if (!graph_def.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto symbol = graph::FromGraphDef(graph_def);
  if (!symbol.ok()) return 0;
  (void)symbol->InferShape({});
  const GraphDef written = graph::ToGraphDef(*symbol);
  auto again = graph::FromGraphDef(written);
  fuzz::RequireOk(again.status(), "FromGraphDef(ToGraphDef(symbol))");
  const GraphDef rewritten = graph::ToGraphDef(*again);
  if (!google::protobuf::util::MessageDifferencer::Equals(rewritten, written)) {
    std::fprintf(stderr, "written:\n%s\nrewritten:\n%s\n", written.DebugString().c_str(),
                 rewritten.DebugString().c_str());
    fuzz::Require(false, "GraphDef round trip is stable");
  }
  return 0;
}
