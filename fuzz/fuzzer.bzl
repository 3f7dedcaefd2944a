"""tessera_fuzzer: one libFuzzer target in its two builds.

  <name>_fuzzer             cc_binary. Under --config=fuzz (clang, ASan, UBSan; ./tessera fuzz)
                            libFuzzer's own main drives it; in the everyday build a small main
                            runs the files and folders given as arguments, so it still builds.
  <name>_regression_test    cc_test: every file of corpus/<name>/ and regressions/<name>/ once,
                            one gtest case per file (the CI side).
"""

def tessera_fuzzer(name, deps):
    src = name + "_fuzzer.cc"
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = [src],
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            ":fuzzing": [],
            "//conditions:default": [":replay_main"],
        }),
    )
    native.cc_test(
        name = name + "_regression_test",
        size = "small",
        srcs = [src],
        args = [
            "fuzz/corpus/" + name,
            "fuzz/regressions/" + name,
        ],
        data = native.glob([
            "corpus/%s/**" % name,
            "regressions/%s/**" % name,
        ]),
        deps = deps + [":regression_main"],
    )
