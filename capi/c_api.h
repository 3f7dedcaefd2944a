/* Tessera's C API: what language bindings (the Python SDK, through ctypes) call to build,
 * inspect and convert symbols with the same code as C++, as bindings call MXNet's
 * libmxnet. Built as libtessera_c.so (//capi:libtessera_c.so).
 *
 * Every function returns 0 on success and -1 on failure; TesseraGetLastError() then gives
 * "CODE: message" (CODE as gRPC spells status codes). Strings and buffers a function
 * returns belong to the library and stay valid until the calling thread's next call.
 * Lists and maps cross the boundary as JSON text. A handle is a symbol value: free it
 * with TesseraSymbolFree; functions never take ownership of handles passed in.
 *
 * Thread safety: calls may come from any thread, except that TesseraSymbolSetAttr must not
 * run concurrently with other uses of the symbols sharing those nodes. */
#ifndef TESSERA_CAPI_C_API_H_
#define TESSERA_CAPI_C_API_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* TesseraSymbolHandle;

/* The last error of the calling thread. */
const char* TesseraGetLastError(void);

/* The operator registry as `tessera ops --json` prints it. */
int TesseraListOperators(const char** json);

/* A variable; attrs_json: an object of string values ("lr_mult", "__shape__"), or NULL. */
int TesseraSymbolVariable(const char* name, const char* attrs_json, TesseraSymbolHandle* out);

/* Operator `op` applied to `num_inputs` inputs. params_json: an object of string values.
 * input_names[i] is the argument input i is given for, or NULL for a positional one
 * (input_names itself may be NULL: all positional). Arguments not given become variables
 * "<name>_<argument>". name: the node's name, or NULL/"" for an automatic one. */
int TesseraSymbolCreate(const char* op, const char* params_json, int num_inputs,
                        const char** input_names, const TesseraSymbolHandle* inputs,
                        const char* name, const char* attrs_json, TesseraSymbolHandle* out);

/* The outputs of every symbol, in order. */
int TesseraSymbolGroup(int num_symbols, const TesseraSymbolHandle* symbols,
                       TesseraSymbolHandle* out);
/* Output `index`, or (index < 0) the output named `name`. */
int TesseraSymbolGetOutput(TesseraSymbolHandle symbol, int index, const char* name,
                           TesseraSymbolHandle* out);
/* Every output of every node. */
int TesseraSymbolGetInternals(TesseraSymbolHandle symbol, TesseraSymbolHandle* out);

/* {"heads": [node name per output], "arguments": [...], "outputs": [...], "aux_states": [...],
 *  "attrs": {node: {key: value}}}. */
int TesseraSymbolDescribe(TesseraSymbolHandle symbol, const char** json);
/* Attribute `key` ("lr_mult" or "__lr_mult__") of the first head node; *value is NULL when
 * it has none. */
int TesseraSymbolGetAttr(TesseraSymbolHandle symbol, const char* key, const char** value);
/* Sets `key` on every head node. */
int TesseraSymbolSetAttr(TesseraSymbolHandle symbol, const char* key, const char* value);

/* Partial inference from known_json ({argument: [dims]} / {argument: "float32"}):
 * {"arguments": [...], "outputs": [...], "aux_states": [...], "complete": bool}, each entry
 * a list of dims (shapes) or a dtype name, null where unknown. */
int TesseraSymbolInferShape(TesseraSymbolHandle symbol, const char* known_json, const char** json);
int TesseraSymbolInferType(TesseraSymbolHandle symbol, const char* known_json, const char** json);

/* MXNet symbol JSON (any generation on reading; MXNet 1.6's form on writing). */
int TesseraSymbolToJson(TesseraSymbolHandle symbol, const char** json);
int TesseraSymbolFromJson(const char* json, TesseraSymbolHandle* out);
/* The GraphDef protobuf (proto/graph.proto), serialized. */
int TesseraSymbolToGraphDef(TesseraSymbolHandle symbol, const char** bytes, size_t* size);
int TesseraSymbolFromGraphDef(const char* bytes, size_t size, TesseraSymbolHandle* out);

int TesseraSymbolFree(TesseraSymbolHandle symbol);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_CAPI_C_API_H_ */
