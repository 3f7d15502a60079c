#!/usr/bin/env python3
"""Whether two generated CUDA C sources compile to the same PTX (NVRTC, no GPU needed).

    python3 scripts/ptx_same.py A.cu B.cu [--arch compute_90]

Compares the PTX with comments and line information left out, so a change that only moves
comments or source lines, or rewrites the C into code the compiler folds the same way,
shows as "identical": no GPU A/B is needed for it (docs/PERF.md, session 18). Prints the
first differing lines otherwise, and exits 1. Needs libnvrtc (./scripts/test.sh installs it;
LD_LIBRARY_PATH as there). The sources: `tessera explain qwen3::decode_step --cuda [--model DIR]`.
"""
import ctypes
import difflib
import signal
import sys


def ptx(lib, path, arch):
    src = open(path).read().encode()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) != 0:
        sys.exit(f"{path}: nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
    if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        sys.exit(f"{path}: NVRTC failed\n{log.value.decode()[:4000]}")
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    out = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, out)
    keep = lambda l: not l.strip().startswith("//") and ".loc" not in l and ".file" not in l
    return [l for l in out.value.decode().splitlines() if keep(l)]


def main():
    args = sys.argv[1:]
    arch = "compute_90"
    if "--arch" in args:
        i = args.index("--arch")
        arch = args[i + 1]
        del args[i : i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    lib = None
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            pass
    if lib is None:
        sys.exit("libnvrtc not found (set LD_LIBRARY_PATH as ./scripts/test.sh does)")
    a, b = (ptx(lib, p, arch) for p in args)
    if a == b:
        print(f"identical ({len(a)} lines of PTX, {arch})")
        return
    print(f"DIFFERENT ({len(a)} against {len(b)} lines of PTX, {arch})")
    print("\n".join(list(difflib.unified_diff(a, b, lineterm="", n=1))[:60]))
    sys.exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into `head`: stop quietly
    main()
