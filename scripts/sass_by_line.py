#!/usr/bin/env python3
"""Where a generated kernel's machine code goes, without a GPU: SASS instructions per
source line and per stage body.

    python3 scripts/sass_by_line.py A.cu [--arch sm_90a] [--lines N]

Compiles A.cu with NVRTC for a real architecture (line information on; sm_90a, what the
engine builds for an H100 or H200), disassembles the cubin with nvdisasm (`pip install
nvidia-cuda-nvdisasm`, or a CUDA toolkit's) and prints ptxas's registers and spill, then
per function of the megakernel (each `<kernel>_body`, the prelude's helpers, the persistent
loop) its instruction count, barriers, spill loads and stores (LDL / STL) and commonest
opcodes, then the N source lines with the most instructions. How session 27's per-element
`expf`s and session 28's branches in the argmax steps were found, and session 29's spills
(one persistent kernel has one register budget: a spill inside a body cost 5-7%;
docs/PERF.md). Needs libnvrtc (./scripts/test.sh installs it;
LD_LIBRARY_PATH as there). The sources: `tessera explain qwen3::decode_step --cuda
[--model DIR]`.
"""
import argparse
import collections
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

OPCODE = re.compile(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)")
FUNCTION = re.compile(
    r'(?:__device__ __forceinline__ void (\w+_body)\(|extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\()'
)


def cubin(path, arch):
    lib = ctypes.CDLL("libnvrtc.so.13")
    src = open(path).read().encode()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = [
        f"--gpu-architecture={arch}".encode(),
        b"--std=c++17",
        b"--generate-line-info",
        b"--ptxas-options=-v",
    ]
    failed = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    if failed:
        sys.exit(log.value.decode()[:3000])
    n = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    out = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, out)
    # ptxas's lines on registers and spill (the first block is the megakernel's).
    usage = [l.strip() for l in log.value.decode().splitlines() if "spill" in l or "registers" in l]
    return out.raw, usage


def nvdisasm():
    found = shutil.which("nvdisasm")
    if found:
        return found
    import site

    for s in site.getsitepackages():
        for f in glob.glob(os.path.join(s, "nvidia", "**", "bin", "nvdisasm"), recursive=True):
            return f
    sys.exit("no nvdisasm: pip install nvidia-cuda-nvdisasm (or put a CUDA toolkit's on PATH)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--lines", type=int, default=20)
    a = ap.parse_args()
    text = open(a.source).read().splitlines()
    cub = a.source + ".cubin"
    code, usage = cubin(a.source, a.arch)
    open(cub, "wb").write(code)
    sass = subprocess.run([nvdisasm(), "-c", "-g", cub], capture_output=True, text=True).stdout
    starts = [(i, m.group(1) or m.group(2)) for i, l in enumerate(text, 1) if (m := FUNCTION.match(l))]

    def function(line):
        name = "prelude"
        for start, f in starts:
            if start <= line:
                name = f
        return name

    per_line = collections.defaultdict(collections.Counter)
    line = None
    for l in sass.splitlines():
        m = re.search(r"line (\d+)", l)
        if l.strip().startswith("//##") and m:
            line = int(m.group(1))
            continue
        op = OPCODE.match(l)
        if op and line is not None:
            per_line[line][op.group(2)] += 1
    per_function = collections.defaultdict(collections.Counter)
    for ln, c in per_line.items():
        per_function[function(ln)].update(c)
    total = sum(sum(c.values()) for c in per_function.values())
    print(f"{a.source}: {total} instructions ({a.arch})")
    for u in usage[:2]:
        print(f"  {u}")
    for f, c in sorted(per_function.items(), key=lambda x: -sum(x[1].values())):
        bars = sum(k for o, k in c.items() if o.startswith("BAR.SYNC"))
        spill = [sum(k for o, k in c.items() if o.startswith(p)) for p in ("LDL", "STL")]
        common = ", ".join(f"{o} {k}" for o, k in c.most_common(6))
        print(
            f"  {f:36s} {sum(c.values()):6d}  barriers {bars:3d}  branches {c['BRA']:4d}"
            f"  spill ld/st {spill[0]:3d}/{spill[1]:<3d}  {common}"
        )
    print(f"the {a.lines} source lines with the most instructions:")
    for ln, c in sorted(per_line.items(), key=lambda x: -sum(x[1].values()))[: a.lines]:
        common = ", ".join(f"{o} {k}" for o, k in c.most_common(3))
        print(f"  {sum(c.values()):5d}  line {ln:5d} ({function(ln)}): {text[ln - 1].strip()[:90]}  [{common}]")


if __name__ == "__main__":
    main()
