#!/usr/bin/env bash
# Runs the hand-written probes on the GPU machine in one device call. Build them into
# .gpu/probe/ with a CUDA 12.8+ toolkit, here or on the device machine (it had nvcc 13.0
# at /usr/local/cuda/bin in session 16; this development machine had none), then carry .gpu:
#   NV=<a CUDA 12.8+ toolkit>; for p in chain hops atomics cluster_hops hop_parts hop_bound; do
#     $NV/bin/nvcc -O3 -gencode=arch=compute_90,code=sm_90 -o .gpu/probe/$p scripts/probe/$p.cu; done
#   device run: carry [".gpu"], command: bash scripts/probe/device_probes.sh [NAME...]
# Each probe's output goes to $OUT/NAME.txt (and to stdout). Before a device call, here:
# `bash scripts/probe/check_syntax.sh` checks every probe as C++ (g++, no CUDA needed).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader | tee "$OUT/gpu.csv"
status=0
names=("$@"); [[ ${#names[@]} -gt 0 ]] || names=(chain hops)
for p in "${names[@]}"; do
  echo "=== probe $p"
  timeout 240 ".gpu/probe/$p" 2>&1 | tee "$OUT/$p.txt" || { status=1; echo "probe $p FAILED or timed out"; }
done
exit $status
