"""Symbols, as MXNet's `mx.sym` composes them: a Python handle on a C++ Symbol (graph/symbol.h),
so composition, parameter checks, shape and type inference and the JSON and GraphDef forms
are the C++ code's, through libtessera_c.so (tessera._lib).

    from tessera import sym
    net = sym.Variable("data")
    net = sym.FullyConnected(data=net, num_hidden=64, name="fc1")
    net = sym.Activation(data=net, act_type="relu")
    net = sym.SoftmaxOutput(net, name="softmax")
    net.list_arguments()        # ['data', 'fc1_weight', 'fc1_bias', 'softmax_label']
    net.infer_shape(data=(64, 784))

One function per registered operator (`tessera ops` lists them) is made when this module is
imported, with the operator's parameters in its docstring. Inputs are symbols, given by
position or by argument name; every other keyword argument is an operator parameter, passed
as text (True, (5, 5), 0.1) and checked by the operator. Arguments not given become
variables named "<name>_<argument>" (fc1_weight, fc1_bias).
"""
import ctypes
import json
import numbers
import sys

import numpy as np

from tessera import _lib
from tessera._lib import SymbolHandle, call, call_for_json, call_for_string, encode


class Symbol:
    """A symbolic network: the outputs of a graph of operator nodes."""

    def __init__(self, handle):
        self._handle = handle

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:  # None at interpreter exit
            _lib.library().TesseraSymbolFree(self._handle)
            self._handle = None

    def _describe(self):
        return call_for_json("TesseraSymbolDescribe", self._handle)

    @property
    def name(self):
        """The head node's name; None for a group of several outputs."""
        heads = self._describe()["heads"]
        return heads[0] if len(heads) == 1 else None

    def list_arguments(self):
        return self._describe()["arguments"]

    def list_outputs(self):
        return self._describe()["outputs"]

    def list_auxiliary_states(self):
        return self._describe()["aux_states"]

    def list_inputs(self):
        described = self._describe()
        return described["arguments"] + described["aux_states"]

    def attr(self, key):
        """Attribute `key` ("lr_mult" or "__lr_mult__") of the head node, or None."""
        return call_for_string("TesseraSymbolGetAttr", self._handle, encode(key))

    def attr_dict(self):
        """{node name: {attribute: value}} for every node with attributes."""
        return self._describe()["attrs"]

    def list_attr(self):
        return self.attr_dict().get(self.name, {})

    def _set_attr(self, **attrs):
        for key, value in attrs.items():
            call("TesseraSymbolSetAttr", self._handle, encode(key), encode(value))

    def get_internals(self):
        return _new("TesseraSymbolGetInternals", self._handle)

    def __getitem__(self, index):
        if isinstance(index, str):
            return _new("TesseraSymbolGetOutput", self._handle, -1, encode(index))
        if not isinstance(index, numbers.Integral):
            raise TypeError(f"symbol index must be an int or an output name, not {index!r}")
        if index < 0:
            index += len(self)
        return _new("TesseraSymbolGetOutput", self._handle, int(index), None)

    def __len__(self):
        return len(self._describe()["heads"])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def infer_shape(self, *args, **kwargs):
        """(argument shapes, output shapes, auxiliary shapes) from the shapes of some arguments
        (positionally in list_arguments() order, or by name); (None, None, None) when they
        do not determine every shape. A contradiction raises, naming the node."""
        result = self._infer("TesseraSymbolInferShape", args, kwargs, _shape_list)
        return result[:3] if result[-1] else (None, None, None)

    def infer_shape_partial(self, *args, **kwargs):
        """As infer_shape, with () for each shape still unknown."""
        return self._infer("TesseraSymbolInferShape", args, kwargs, _shape_list)[:3]

    def infer_type(self, *args, **kwargs):
        """(argument, output, auxiliary) NumPy dtypes from those of some arguments; (None,
        None, None) when they do not determine every type."""
        def given(value):
            return np.dtype(value).name
        result = self._infer("TesseraSymbolInferType", args, kwargs, _dtype_list, given)
        return result[:3] if result[-1] else (None, None, None)

    def _infer(self, function, args, kwargs, convert, given=lambda v: [int(d) for d in v]):
        if args and kwargs:
            raise TypeError("give the known values by position or by name, not both")
        known = dict(kwargs)
        if args:
            known = {name: v for name, v in zip(self.list_arguments(), args) if v is not None}
        known = {name: given(value) for name, value in known.items() if value is not None}
        found = call_for_json(function, self._handle, encode(json.dumps(known)))
        return (convert(found["arguments"]), convert(found["outputs"]),
                convert(found["aux_states"]), found["complete"])

    def tojson(self):
        """MXNet symbol JSON (1.6's form), which MXNet's mx.sym.load_json reads."""
        return call_for_string("TesseraSymbolToJson", self._handle)

    def save(self, fname):
        with open(fname, "w") as out:
            out.write(self.tojson())

    def graphdef(self):
        """The GraphDef protobuf (proto/graph.proto) jobs carry."""
        from tessera._wire.proto import graph_pb2
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        call("TesseraSymbolToGraphDef", self._handle, ctypes.byref(data), ctypes.byref(size))
        return graph_pb2.GraphDef.FromString(ctypes.string_at(data, size.value))

    def __repr__(self):
        name = self.name
        return f"<Symbol {name}>" if name else f"<Symbol group [{', '.join(self.list_outputs())}]>"

    # Arithmetic, as MXNet's: elementwise with a symbol, the *_scalar operators with a number.
    def _binary(self, other, op, scalar_op):
        if isinstance(other, Symbol):
            return _create(op, [self, other], {})
        if isinstance(other, numbers.Number):
            return _create(scalar_op, [self], {"scalar": other})
        return NotImplemented

    def __add__(self, other):
        return self._binary(other, "elemwise_add", "_plus_scalar")

    def __sub__(self, other):
        return self._binary(other, "elemwise_sub", "_minus_scalar")

    def __mul__(self, other):
        return self._binary(other, "elemwise_mul", "_mul_scalar")

    def __truediv__(self, other):
        return self._binary(other, "elemwise_div", "_div_scalar")

    def __pow__(self, other):
        return self._binary(other, "broadcast_power", "_power_scalar")

    __radd__, __rmul__ = __add__, __mul__

    def __rsub__(self, other):
        return self._binary(other, None, "_rminus_scalar")

    def __rtruediv__(self, other):
        return self._binary(other, None, "_rdiv_scalar")

    def __rpow__(self, other):
        return self._binary(other, None, "_rpower_scalar")

    def __neg__(self):
        return _create("negative", [self], {})


def _new(function, *args):
    handle = SymbolHandle()
    call(function, *args, ctypes.byref(handle))
    return Symbol(handle)


def _shape_list(shapes):
    return [() if s is None else tuple(s) for s in shapes]


def _dtype_list(dtypes):
    return [None if d is None else np.dtype(d) for d in dtypes]


def _param_text(value):
    """An operator parameter as the text the C++ parser reads: True, (5, 5), 0.1, relu."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    return str(value)


def _attr_json(attr):
    return None if not attr else encode(json.dumps({k: str(v) for k, v in attr.items()}))


def _create(op, inputs, params, names=None, name=None, attr=None):
    handles = (SymbolHandle * len(inputs))(*[s._handle for s in inputs])
    input_names = (ctypes.c_char_p * len(inputs))(
        *[encode(n) for n in (names or [None] * len(inputs))])
    text = encode(json.dumps({k: _param_text(v) for k, v in params.items()}))
    return _new("TesseraSymbolCreate", encode(op), text, len(inputs), input_names, handles,
                encode(name), _attr_json(attr))


def Variable(name, attr=None, shape=None, lr_mult=None, wd_mult=None, dtype=None, init=None,
             **kwargs):
    """A variable: data, a label, or a parameter the optimizer updates. shape, dtype, lr_mult,
    wd_mult and init become its "__shape__", ... attributes, as in MXNet."""
    attrs = dict(attr or {})
    for key, value in (("shape", shape), ("lr_mult", lr_mult), ("wd_mult", wd_mult),
                       ("dtype", dtype), ("init", init), *kwargs.items()):
        if value is not None:
            attrs[f"__{key.strip('_')}__"] = _param_text(value)
    handle = SymbolHandle()
    call("TesseraSymbolVariable", encode(name), _attr_json(attrs), ctypes.byref(handle))
    return Symbol(handle)


var = Variable


def Group(symbols):
    """The outputs of every symbol, in order (e.g. a loss and a prediction)."""
    symbols = list(symbols)
    handles = (SymbolHandle * len(symbols))(*[s._handle for s in symbols])
    return _new("TesseraSymbolGroup", len(symbols), handles)


def load_json(text):
    """A symbol from MXNet symbol JSON of any generation (0.8 to 1.x, Gluon exports)."""
    return _new("TesseraSymbolFromJson", encode(text))


def load(fname):
    with open(fname) as f:
        return load_json(f.read())


def fromgraphdef(graph_def):
    """A symbol from a GraphDef message (or its serialized bytes)."""
    data = graph_def if isinstance(graph_def, bytes) else graph_def.SerializeToString()
    return _new("TesseraSymbolFromGraphDef", data, len(data))


def _operator_function(info):
    op, variadic = info["name"], info["variadic"]

    def function(*args, name=None, attr=None, **kwargs):
        inputs, names, params = [], [], {}
        for value in args:
            if not isinstance(value, Symbol):
                raise TypeError(f"{op}: positional arguments are input symbols, got {value!r}")
            inputs.append(value)
            names.append(None)
        for key, value in kwargs.items():
            if isinstance(value, Symbol):
                inputs.append(value)
                names.append(key)
            else:
                params[key] = value
        if variadic and variadic not in params:
            params[variadic] = len(inputs)
        return _create(op, inputs, params, names, name, attr)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = _docstring(info)
    return function


def _docstring(info):
    lines = [info["description"] or info["name"], ""]
    if info["variadic"]:
        lines.append(f"Inputs: any number of symbols, by position ({info['variadic']} is set "
                     "to their count).")
    else:
        lines.append(f"Inputs: {', '.join(info['arguments']) or '-'} (symbols).")
    lines += ["", "Parameters:"]
    for p in info["params"]:
        default = "required" if p["required"] else f"default {p['default']}"
        lines.append(f"    {p['name']} ({p['type']}, {default}): {p['description']}")
    lines += ["    name: the node's name (default: the operator's, numbered)",
              "    attr: node attributes, e.g. {'ctx_group': 'dev1'}"]
    return "\n".join(lines)


def operators():
    """Every registered operator as `tessera ops --json` describes it."""
    return call_for_json("TesseraListOperators")


def _define_operator_functions(namespace):
    for info in operators():
        namespace.setdefault(info["name"], _operator_function(info))


try:
    _define_operator_functions(sys.modules[__name__].__dict__)
except Exception as error:  # noqa: BLE001 - without the library, say so on first use instead
    _missing_library = error

    def __getattr__(name):
        raise AttributeError(f"tessera.symbol has no operator {name!r}: {_missing_library}")
