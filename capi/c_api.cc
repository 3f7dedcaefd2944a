#include "capi/c_api.h"

#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "graph/graph_def.h"
#include "graph/symbol.h"
#include "graph/symbol_json.h"
#include "nlohmann/json.hpp"
#include "ops/registry_json.h"

namespace {

using tessera::DType;
using tessera::Shape;
using tessera::graph::InferResult;
using tessera::graph::Symbol;
using Json = nlohmann::json;

// What the calling thread's last call left behind: its error, and the string it returned.
thread_local std::string last_error;
thread_local std::string last_result;

Symbol& Get(TesseraSymbolHandle handle) { return *static_cast<Symbol*>(handle); }

TesseraSymbolHandle NewHandle(Symbol symbol) { return new Symbol(std::move(symbol)); }

int Fail(const absl::Status& status) {
  last_error = absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  return -1;
}

// Runs `body` (returning absl::Status) and turns its status, or an exception escaping the
// library (a JSON argument that does not parse), into the C convention.
template <typename Body>
int Call(Body body) {
  try {
    absl::Status status = body();
    return status.ok() ? 0 : Fail(status);
  } catch (const std::exception& e) {
    return Fail(absl::InvalidArgumentError(e.what()));
  }
}

void Return(std::string text, const char** out) {
  last_result = std::move(text);
  *out = last_result.c_str();
}

// A JSON object of strings (NULL or "" for none) as ordered key/value pairs.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StringPairs(const char* json,
                                                                             const char* what) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (json == nullptr || *json == '\0') return pairs;
  const Json parsed = Json::parse(json);
  if (!parsed.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not an object"));
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", key, "': not a string"));
    }
    pairs.emplace_back(key, value.get<std::string>());
  }
  return pairs;
}

absl::StatusOr<tessera::graph::Attrs> AttrsOf(const char* json) {
  auto pairs = StringPairs(json, "attribute");
  if (!pairs.ok()) return pairs.status();
  return tessera::graph::Attrs(pairs->begin(), pairs->end());
}

Json ToJson(const Shape& shape) {
  return shape.ndim() == 0 ? Json() : Json(std::vector<int64_t>(shape.begin(), shape.end()));
}

Json ToJson(DType dtype) {
  return dtype == DType::kUnknown ? Json() : Json(tessera::DTypeName(dtype));
}

template <typename T>
std::string ResultJson(const InferResult<T>& result) {
  auto list = [](const std::vector<T>& values) {
    Json out = Json::array();
    for (const T& v : values) out.push_back(ToJson(v));
    return out;
  };
  return Json{{"arguments", list(result.arguments)},
              {"outputs", list(result.outputs)},
              {"aux_states", list(result.aux_states)},
              {"complete", result.complete}}
      .dump();
}

absl::StatusOr<Shape> ShapeOf(const std::string& name, const Json& value) {
  if (!value.is_array()) return absl::InvalidArgumentError(absl::StrCat(name, ": not a shape"));
  Shape shape;
  for (const Json& d : value) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": shape ", value.dump(), " has a dimension that is not >= 0"));
    }
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

}  // namespace

extern "C" {

const char* TesseraGetLastError(void) { return last_error.c_str(); }

int TesseraListOperators(const char** json) {
  return Call([&]() -> absl::Status {
    absl::StatusOr<std::string> text = tessera::ops::DescribeOperatorsJson();
    if (!text.ok()) return text.status();
    Return(*std::move(text), json);
    return absl::OkStatus();
  });
}

int TesseraSymbolVariable(const char* name, const char* attrs_json, TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    absl::StatusOr<tessera::graph::Attrs> attrs = AttrsOf(attrs_json);
    if (!attrs.ok()) return attrs.status();
    *out = NewHandle(Symbol::Variable(name, *attrs));
    return absl::OkStatus();
  });
}

int TesseraSymbolCreate(const char* op, const char* params_json, int num_inputs,
                        const char** input_names, const TesseraSymbolHandle* inputs,
                        const char* name, const char* attrs_json, TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    auto params = StringPairs(params_json, absl::StrCat(op, " parameter").c_str());
    if (!params.ok()) return params.status();
    absl::StatusOr<tessera::graph::Attrs> attrs = AttrsOf(attrs_json);
    if (!attrs.ok()) return attrs.status();
    std::vector<tessera::graph::SymbolInput> given;
    for (int i = 0; i < num_inputs; ++i) {
      const Symbol& input = Get(inputs[i]);
      if (input_names != nullptr && input_names[i] != nullptr) {
        given.emplace_back(input_names[i], input);
      } else {
        given.emplace_back(input);
      }
    }
    absl::StatusOr<Symbol> symbol =
        Symbol::Create(op, *params, given, name == nullptr ? "" : name, *attrs);
    if (!symbol.ok()) return symbol.status();
    *out = NewHandle(*std::move(symbol));
    return absl::OkStatus();
  });
}

int TesseraSymbolGroup(int num_symbols, const TesseraSymbolHandle* symbols,
                       TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    std::vector<Symbol> parts;
    for (int i = 0; i < num_symbols; ++i) parts.push_back(Get(symbols[i]));
    *out = NewHandle(Symbol::Group(parts));
    return absl::OkStatus();
  });
}

int TesseraSymbolGetOutput(TesseraSymbolHandle symbol, int index, const char* name,
                           TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    absl::StatusOr<Symbol> output =
        index >= 0 ? Get(symbol)[index] : Get(symbol).GetOutput(name == nullptr ? "" : name);
    if (!output.ok()) return output.status();
    *out = NewHandle(*std::move(output));
    return absl::OkStatus();
  });
}

int TesseraSymbolGetInternals(TesseraSymbolHandle symbol, TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    *out = NewHandle(Get(symbol).GetInternals());
    return absl::OkStatus();
  });
}

int TesseraSymbolDescribe(TesseraSymbolHandle symbol, const char** json) {
  return Call([&]() -> absl::Status {
    const Symbol& s = Get(symbol);
    std::vector<std::string> heads;
    for (const tessera::graph::NodeEntry& e : s.outputs()) heads.push_back(e.node->name);
    Return(Json{{"heads", heads},
                {"arguments", s.ListArguments()},
                {"outputs", s.ListOutputs()},
                {"aux_states", s.ListAuxiliaryStates()},
                {"attrs", s.ListAttrs()}}
               .dump(),
           json);
    return absl::OkStatus();
  });
}

int TesseraSymbolGetAttr(TesseraSymbolHandle symbol, const char* key, const char** value) {
  return Call([&]() -> absl::Status {
    std::optional<std::string> found = Get(symbol).GetAttr(key);
    if (found.has_value()) {
      Return(*std::move(found), value);
    } else {
      *value = nullptr;
    }
    return absl::OkStatus();
  });
}

int TesseraSymbolSetAttr(TesseraSymbolHandle symbol, const char* key, const char* value) {
  return Call([&]() -> absl::Status {
    Get(symbol).SetAttr(key, value);
    return absl::OkStatus();
  });
}

int TesseraSymbolInferShape(TesseraSymbolHandle symbol, const char* known_json, const char** json) {
  return Call([&]() -> absl::Status {
    std::map<std::string, Shape> known;
    const Json given = Json::parse(known_json);
    for (const auto& [name, value] : given.items()) {
      absl::StatusOr<Shape> shape = ShapeOf(name, value);
      if (!shape.ok()) return shape.status();
      known[name] = *std::move(shape);
    }
    absl::StatusOr<InferResult<Shape>> result = Get(symbol).InferShape(known);
    if (!result.ok()) return result.status();
    Return(ResultJson(*result), json);
    return absl::OkStatus();
  });
}

int TesseraSymbolInferType(TesseraSymbolHandle symbol, const char* known_json, const char** json) {
  return Call([&]() -> absl::Status {
    std::map<std::string, DType> known;
    const Json given = Json::parse(known_json);
    for (const auto& [name, value] : given.items()) {
      absl::StatusOr<DType> dtype = tessera::ParseDType(value.get<std::string>());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", dtype.status().message()));
      }
      known[name] = *dtype;
    }
    absl::StatusOr<InferResult<DType>> result = Get(symbol).InferType(known);
    if (!result.ok()) return result.status();
    Return(ResultJson(*result), json);
    return absl::OkStatus();
  });
}

int TesseraSymbolToJson(TesseraSymbolHandle symbol, const char** json) {
  return Call([&]() -> absl::Status {
    Return(tessera::graph::SymbolToJson(Get(symbol)), json);
    return absl::OkStatus();
  });
}

int TesseraSymbolFromJson(const char* json, TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    absl::StatusOr<Symbol> symbol = tessera::graph::SymbolFromJson(json);
    if (!symbol.ok()) return symbol.status();
    *out = NewHandle(*std::move(symbol));
    return absl::OkStatus();
  });
}

int TesseraSymbolToGraphDef(TesseraSymbolHandle symbol, const char** bytes, size_t* size) {
  return Call([&]() -> absl::Status {
    Return(tessera::graph::ToGraphDef(Get(symbol)).SerializeAsString(), bytes);
    *size = last_result.size();
    return absl::OkStatus();
  });
}

int TesseraSymbolFromGraphDef(const char* bytes, size_t size, TesseraSymbolHandle* out) {
  return Call([&]() -> absl::Status {
    tessera::GraphDef graph_def;
    if (!graph_def.ParseFromArray(bytes, static_cast<int>(size))) {
      return absl::InvalidArgumentError("not a serialized GraphDef");
    }
    absl::StatusOr<Symbol> symbol = tessera::graph::FromGraphDef(graph_def);
    if (!symbol.ok()) return symbol.status();
    *out = NewHandle(*std::move(symbol));
    return absl::OkStatus();
  });
}

int TesseraSymbolFree(TesseraSymbolHandle symbol) {
  delete static_cast<Symbol*>(symbol);
  return 0;
}

}  // extern "C"
