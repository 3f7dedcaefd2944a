// Fuzz target: the GraphDef protobuf (graph/graph_def.h), bytes as a serialized GraphDef. A
// graph that loads must convert back (ToGraphDef) and load again.
#include <cstddef>
#include <cstdint>

#include "fuzz/require.h"
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
  fuzz::Require(graph::ToGraphDef(*again).SerializeAsString() == written.SerializeAsString(),
                "GraphDef round trip is stable");
  return 0;
}
