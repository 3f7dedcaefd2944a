"""cuda_library: .cu files compiled by nvcc into a static library, as a cc_library.

Bazel 4 has no CUDA rules, so a genrule runs /usr/local/cuda/bin/nvcc over every source at
once (`-lib`) and a cc_library takes the archive. Everything is gated on
//third_party:use_cuda: without it the genrule writes an empty archive (so that
`bazel build //...` still works on a machine without nvcc) and the cc_library has no sources.

The .cu files may include headers of the workspace (given in `hdrs` or in the `srcs` of the
genrule through `hdrs`) and the CUDA toolkit's; nothing else (no absl): keep them to kernels
and plain launch functions, and put Status handling in .cc files.
"""

# Hopper SASS plus PTX of the same architecture, which the driver JIT-compiles for newer GPUs.
_NVCC_FLAGS = [
    "-O3",
    "-std=c++20",
    "-Xcompiler -fPIC",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
    "-I.",
    "-I$(GENDIR)",
    "-I/usr/local/cuda/include",
    "-DTESSERA_USE_CUDA=1",
]

def cuda_library(name, srcs, hdrs = [], deps = [], visibility = None, **kwargs):
    """A cc_library `name` holding the device code of `srcs` (.cu), with headers `hdrs`."""
    archive = "lib%s_nvcc.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs,
        outs = [archive],
        cmd = select({
            "//third_party:use_cuda": " ".join(
                ["/usr/local/cuda/bin/nvcc"] + _NVCC_FLAGS +
                ["-lib", "-o", "$@"] +
                ["$(location %s)" % s for s in srcs],
            ),
            # An empty ar archive: the magic line alone.
            "//conditions:default": "printf '!<arch>\\n' > $@",
        }),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = select({
            "//third_party:use_cuda": [":" + archive],
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda"],
        alwayslink = True,
        visibility = visibility,
        **kwargs
    )
