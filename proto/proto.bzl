"""tessera_cc_proto: C++ (and optionally gRPC) code from one .proto, with the system protoc.

Bazel 4 offline has no usable rules_proto toolchain, so a genrule runs Debian's protoc (and
grpc_cpp_plugin) and a cc_library wraps the generated files (BUILD-NOTES.md, item 5).

    tessera_cc_proto(name = "tensor")                        # tensor.proto -> :tensor_cc_proto
    tessera_cc_proto(name = "worker", deps = [":tensor"], grpc = True)

For `name`, the macro defines:
  :<name>_proto      filegroup of <name>.proto and every .proto it imports (transitively),
                     which protoc needs as inputs;
  :<name>_cc_proto   cc_library of <name>.pb.{h,cc} (+ <name>.grpc.pb.{h,cc} with grpc);
                     include it as "proto/<name>.pb.h" (paths are relative to the workspace).
`deps` names other tessera_cc_proto targets (":tensor" or "//proto:tensor") whose protos
this one imports, as `import "proto/tensor.proto";`.
"""

def tessera_cc_proto(name, src = None, deps = [], grpc = False, visibility = None):
    src = src or (name + ".proto")
    base = src[:-len(".proto")]

    native.filegroup(
        name = name + "_proto",
        srcs = [src] + [d + "_proto" for d in deps],
        visibility = visibility,
    )

    outs = [base + ".pb.h", base + ".pb.cc"]
    plugin = ""
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        plugin = (" --grpc_out=$(GENDIR) " +
                  "--plugin=protoc-gen-grpc=$$(which grpc_cpp_plugin)")

    # --proto_path=. makes import paths and output paths workspace-relative, so the outputs
    # land in $(GENDIR)/<package>/, exactly where Bazel expects the genrule's outs.
    native.genrule(
        name = name + "_proto_gen",
        srcs = [src, ":" + name + "_proto"],
        outs = outs,
        cmd = ("protoc --proto_path=. --cpp_out=$(GENDIR)" + plugin +
               " $(location " + src + ")"),
        message = "protoc " + src,
    )

    native.cc_library(
        name = name + "_cc_proto",
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = [d + "_cc_proto" for d in deps] +
               ["//third_party:grpc" if grpc else "//third_party:protobuf"],
        visibility = visibility,
    )
