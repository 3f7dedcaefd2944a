"""tessera.sym against the C++ code it calls (libtessera_c.so, TESSERA_LIBRARY) and the
command line's loader (`tessera graph inspect`, `tessera ops --json`; TESSERA_BIN): MXNet-style
composition, inference, attributes, errors, and round trips of the symbol files in
tests/graph/io/testdata (MXNet 0.8 to 1.x and a Gluon export) through JSON and GraphDef."""
import json
import os
import pathlib
import subprocess
import tempfile
import unittest

import numpy as np

import tessera
from tessera import sym

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "graph" / "io" / "testdata"


def inspect(path, *shapes):
    """What the C++ loader makes of a symbol file: `tessera graph inspect`."""
    command = [os.environ["TESSERA_BIN"], "graph", "inspect", str(path)]
    for shape in shapes:
        command += ["--shape", shape]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def mlp():
    net = sym.Variable("data")
    net = sym.FullyConnected(data=net, num_hidden=64, name="fc1")
    net = sym.Activation(data=net, act_type="relu", name="relu1")
    net = sym.FullyConnected(net, num_hidden=10, name="fc2")
    return sym.SoftmaxOutput(net, name="softmax")


def lenet():
    net = sym.Variable("data")
    for i, filters in ((1, 20), (2, 50)):
        net = sym.Convolution(net, kernel=(5, 5), num_filter=filters, name=f"conv{i}")
        net = sym.Activation(net, act_type="tanh", name=f"tanh{i}")
        net = sym.Pooling(net, pool_type="max", kernel=(2, 2), stride=(2, 2), name=f"pool{i}")
    net = sym.Flatten(net, name="flatten")
    net = sym.FullyConnected(net, num_hidden=500, name="fc1")
    net = sym.Activation(net, act_type="tanh", name="tanh3")
    net = sym.FullyConnected(net, num_hidden=10, name="fc2")
    return sym.SoftmaxOutput(net, name="softmax")


class SymbolTest(unittest.TestCase):
    def test_composition_names_the_parameters_as_mxnet_does(self):
        net = mlp()
        self.assertEqual(net.name, "softmax")
        self.assertEqual(net.list_arguments(), ["data", "fc1_weight", "fc1_bias", "fc2_weight",
                                                "fc2_bias", "softmax_label"])
        self.assertEqual(net.list_outputs(), ["softmax_output"])
        self.assertEqual(net.list_auxiliary_states(), [])
        no_bias = sym.FullyConnected(sym.var("x"), num_hidden=3, no_bias=True, name="fc")
        self.assertEqual(no_bias.list_arguments(), ["x", "fc_weight"])

    def test_shapes_and_types_are_inferred_by_the_cpp_code(self):
        args, outs, aux = mlp().infer_shape(data=(64, 784))
        self.assertEqual(args, [(64, 784), (64, 784), (64,), (10, 64), (10,), (64,)])
        self.assertEqual((outs, aux), ([(64, 10)], []))
        self.assertEqual(mlp().infer_shape((8, 20))[0][1], (64, 20))  # positional
        self.assertEqual(mlp().infer_shape(), (None, None, None))
        partial = mlp().infer_shape_partial(fc2_weight=(10, 64))
        self.assertEqual(partial[0][3], (10, 64))
        self.assertEqual(partial[0][0], ())
        args, outs, _ = mlp().infer_type(data=np.float32)
        self.assertEqual(set(args) | set(outs), {np.dtype(np.float32)})

    def test_batch_norm_has_auxiliary_states(self):
        net = sym.BatchNorm(sym.var("data"), name="bn")
        self.assertEqual(net.list_auxiliary_states(), ["bn_moving_mean", "bn_moving_var"])
        self.assertEqual(net.list_inputs()[-2:], ["bn_moving_mean", "bn_moving_var"])
        _, _, aux = net.infer_shape(data=(4, 3, 8, 8))
        self.assertEqual(aux, [(3,), (3,)])

    def test_a_lenet_built_in_python_is_the_one_mxnet_saved(self):
        """The C++ loader sees the same arguments, shapes and parameter count in the symbol
        file Python writes as in MXNet 0.8's lenet-symbol.json."""
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "lenet-symbol.json"
            lenet().save(path)
            ours = inspect(path, "data=2,1,28,28")
        self.assertEqual(ours, inspect(TESTDATA / "lenet-symbol.json", "data=2,1,28,28"))
        self.assertIn("parameters: 431080", ours)

    def test_every_symbol_file_round_trips_through_json_and_graphdef(self):
        files = sorted(TESTDATA.glob("*-symbol.json"))
        self.assertGreaterEqual(len(files), 4)
        for path in files:
            with self.subTest(file=path.name):
                loaded = sym.load(path)
                text = loaded.tojson()
                self.assertEqual(sym.load_json(text).tojson(), text)
                self.assertEqual(sym.fromgraphdef(loaded.graphdef()).tojson(), text)
                self.assertEqual(sym.fromgraphdef(loaded.graphdef().SerializeToString())
                                 .list_arguments(), loaded.list_arguments())
                with tempfile.TemporaryDirectory() as tmp:
                    saved = pathlib.Path(tmp) / path.name
                    loaded.save(saved)
                    self.assertEqual(inspect(saved), inspect(path))
                self.assertEqual(json.loads(text)["attrs"]["mxnet_version"], ["int", 10600])

    def test_there_is_a_function_for_every_registered_operator(self):
        listed = json.loads(subprocess.run([os.environ["TESSERA_BIN"], "ops", "--json"],
                                           capture_output=True, text=True, check=True).stdout)
        self.assertEqual(listed, sym.operators())
        self.assertGreater(len(listed), 50)
        for op in listed:
            function = getattr(sym, op["name"])
            self.assertEqual(function.__name__, op["name"])
            for param in op["params"]:
                self.assertIn(param["name"], function.__doc__)

    def test_variadic_operators_count_their_inputs_and_outputs_are_addressable(self):
        a, b, c = sym.var("a"), sym.var("b"), sym.var("c")
        joined = sym.Concat(a, b, c, dim=1, name="cat")
        self.assertEqual(joined.list_arguments(), ["a", "b", "c"])
        self.assertEqual(joined.infer_shape(a=(2, 1), b=(2, 2), c=(2, 3))[1], [(2, 6)])
        parts = sym.SliceChannel(a, num_outputs=3, name="split")
        self.assertEqual(len(parts), 3)
        self.assertEqual(parts[-1].list_outputs(), ["split_output2"])
        self.assertEqual(parts["split_output1"].list_outputs(), ["split_output1"])
        internals = mlp().get_internals()
        self.assertIn("fc1_output", internals.list_outputs())
        self.assertEqual(internals["fc1_output"].infer_shape(data=(5, 7))[1], [(5, 64)])
        group = sym.Group([mlp(), internals["relu1_output"]])
        self.assertEqual(group.list_outputs(), ["softmax_output", "relu1_output"])
        self.assertIsNone(group.name)

    def test_arithmetic_composes_elementwise_and_scalar_operators(self):
        x, y = sym.var("x"), sym.var("y")
        net = (x + y) * 2 - 1 / x
        self.assertEqual(sorted(net.list_arguments()), ["x", "y"])
        self.assertEqual(net.infer_shape(x=(3, 4), y=(3, 4))[1], [(3, 4)])
        self.assertEqual((-x).infer_shape(x=(2,))[1], [(2,)])

    def test_attributes_reach_the_json_mxnet_reads(self):
        weight = sym.Variable("fc_weight", lr_mult=0.5, wd_mult=0, shape=(3, 4))
        net = sym.FullyConnected(sym.var("data"), weight=weight, num_hidden=3, name="fc",
                                 attr={"ctx_group": "dev1"})
        self.assertEqual(weight.attr("lr_mult"), "0.5")
        self.assertEqual(weight.attr("__wd_mult__"), "0")
        self.assertIsNone(weight.attr("init"))
        self.assertEqual(net.list_attr(), {"__ctx_group__": "dev1"})
        net._set_attr(mirror_stage="1")
        self.assertEqual(net.attr("mirror_stage"), "1")
        self.assertEqual(net.infer_shape(data=(2, 4))[0][1], (3, 4))
        reloaded = sym.load_json(net.tojson())
        self.assertEqual(reloaded.attr_dict()["fc_weight"]["__lr_mult__"], "0.5")
        self.assertEqual(reloaded.attr_dict()["fc"]["__ctx_group__"], "dev1")

    def test_errors_name_the_node_and_what_is_wrong(self):
        cases = [
            (lambda: sym.FullyConnected(sym.var("x"), num_hiddn=3, name="fc9"),
             "INVALID_ARGUMENT", ["fc9", "num_hiddn"]),
            (lambda: sym.FullyConnected(sym.var("x"), num_hidden="many", name="fc9"),
             "INVALID_ARGUMENT", ["fc9", "num_hidden"]),
            (lambda: sym.FullyConnected(sym.var("x"), wieght=sym.var("w"), num_hidden=3,
                                        name="fc9"), "INVALID_ARGUMENT", ["fc9", "wieght"]),
            (lambda: sym.FullyConnected(sym.var("x"), data=sym.var("y"), num_hidden=3,
                                        name="fc9"), "INVALID_ARGUMENT", ["fc9", "data"]),
            (lambda: sym.FullyConnected(sym.var("x"), num_hidden=3, name="fc9")
             .infer_shape(x=(2, 5), fc9_weight=(3, 4)), "INVALID_ARGUMENT", ["fc9", "(3,5)"]),
            (lambda: mlp().infer_shape(dta=(1, 2)), "INVALID_ARGUMENT", ["dta"]),
            (lambda: sym.load_json('{"nodes": 3}'), "INVALID_ARGUMENT", ["nodes"]),
            (lambda: sym.load_json("not json"), "INVALID_ARGUMENT", []),
            (lambda: sym.fromgraphdef(b"\xff\xff"), "INVALID_ARGUMENT", ["GraphDef"]),
            (lambda: mlp()[5], "OUT_OF_RANGE", ["softmax_output"]),
            (lambda: mlp()["fc1_output"], "NOT_FOUND", ["fc1_output"]),
        ]
        for make, code, words in cases:
            with self.assertRaises(tessera.TesseraError) as raised:
                make()
            self.assertEqual(raised.exception.code, code, raised.exception)
            for word in words:
                self.assertIn(word, raised.exception.message)
        with self.assertRaises(TypeError):
            sym.Activation(3, act_type="relu")


if __name__ == "__main__":
    unittest.main()
