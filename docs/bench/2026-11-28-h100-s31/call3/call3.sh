#!/usr/bin/env bash
# Session 31 call 3: hop_parts.cu with L1 and L2 prefetches of the first 32 KiB before the wait.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader | tee $ROOT/gpu.csv
"$nv" -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hp scripts/probe/hop_parts.cu > $ROOT/build.log 2>&1 || { tail -30 $ROOT/build.log; exit 1; }
timeout 150 stdbuf -oL /tmp/hp 20 2>&1 | tee $ROOT/hop_parts.txt
