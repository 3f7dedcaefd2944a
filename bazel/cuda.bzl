"""cuda_library: .cu files compiled by nvcc into static libraries, as a cc_library.

Bazel 4 has no CUDA rules, so a genrule per source runs /usr/local/cuda/bin/nvcc (`-lib`) and a
cc_library takes the archives: editing one .cu file recompiles only that file. Everything is
gated on //third_party:use_cuda: without it each genrule writes an empty archive (so that
`bazel build //...` still works on a machine without nvcc) and the cc_library has no sources.

Architectures: CI and everyday builds compile Hopper SASS plus compute_90 PTX, which the driver
JIT-compiles for newer GPUs; `--define=cuda_archs=all` (the GPU bundle, releases) adds SASS for
Ampere (sm_80, sm_86) and Ada (sm_89). Every architecture multiplies nvcc's time.

The .cu files may include headers of the workspace (given in `hdrs` and `nvcc_hdrs`) and the
CUDA toolkit's;
nothing else (no absl): keep them to kernels and plain launch functions, and put Status
handling in .cc files.
"""

_NVCC_COMMON = [
    "-O3",
    "-std=c++20",
    "-Xcompiler -fPIC",
    "-I.",
    "-I$(GENDIR)",
    "-I/usr/local/cuda/include",
    "-DTESSERA_USE_CUDA=1",
]

_ARCHS_DEFAULT = [
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

_ARCHS_ALL = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_86,code=sm_86",
    "-gencode arch=compute_89,code=sm_89",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

def _nvcc(archs, src):
    return " ".join(["/usr/local/cuda/bin/nvcc"] + _NVCC_COMMON + archs +
                    ["-lib", "-o", "$@", "$(location %s)" % src])

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], visibility = None, **kwargs):
    """A cc_library `name` holding the device code of `srcs` (.cu), with headers `hdrs`.

    `nvcc_hdrs`: headers of other packages the .cu files include (files or filegroups); nvcc
    sees them, the cc_library does not export them (their own libraries do, through `deps`).
    """
    archives = []
    for src in srcs:
        stem = src.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        archive = "lib%s_%s_nvcc.a" % (name, stem)
        archives.append(":" + archive)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [archive],
            cmd = select({
                "//third_party:cuda_all_archs": _nvcc(_ARCHS_ALL, src),
                "//third_party:use_cuda": _nvcc(_ARCHS_DEFAULT, src),
                # An empty ar archive: the magic line alone.
                "//conditions:default": "printf '!<arch>\\n' > $@",
            }),
            visibility = ["//visibility:private"],
        )
    native.cc_library(
        name = name,
        srcs = select({
            "//third_party:use_cuda": archives,
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda"],
        alwayslink = True,
        visibility = visibility,
        **kwargs
    )
