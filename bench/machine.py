"""What a Python benchmark's figures were measured on, for its JSON line (bench/machine.h is
the C++ benches' twin): the CPU model, its widest vector ISA and the CPU count."""
import os
import pathlib


def machine():
    model, flags = "unknown", ""
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "unknown":
            model = line.split(":", 1)[1].strip()
        elif line.startswith("flags") and not flags:
            flags = line + " "
    isa = "AVX-512" if " avx512f " in flags else "AVX2" if " avx2 " in flags else "SSE"
    return {"cpu": model, "cpu_isa": isa, "cpus": os.cpu_count()}
