#!/usr/bin/env bash
# Session 30 call 7: the hop probe once more after its PTX wrappers moved to common.cuh
# (the same kernels as call 6), clusters of 4.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
"$nv" -O3 -DCL=4 -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch4 scripts/probe/cluster_hops.cu > $ROOT/build.log 2>&1 || { tail -30 $ROOT/build.log; exit 1; }
timeout 120 /tmp/ch4 20 2>&1 | tee $ROOT/cluster_hops-4.txt
