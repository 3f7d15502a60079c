#!/usr/bin/env bash
# Session 30 call 9: the hop probe with mode 10 (the counter sharded over 16 words: fewer
# reds and polls on each line), beside call 8's modes.
# Clusters of 4 (the cluster modes as in call 7).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
"$nv" -O3 -DCL=4 -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch4 scripts/probe/cluster_hops.cu > $ROOT/build.log 2>&1 || { tail -30 $ROOT/build.log; exit 1; }
timeout 120 stdbuf -oL /tmp/ch4 20 2>&1 | tee $ROOT/cluster_hops-4.txt
