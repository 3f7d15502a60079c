#!/usr/bin/env bash
# Session 30 call 8: the hop probe with two more modes, what the publish's release waits
# for: 8 stores (the outputs plain stores into each CTA's own slots), 9 silent (no outputs).
# Clusters of 4 (the cluster modes as in call 7).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
"$nv" -O3 -DCL=4 -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch4 scripts/probe/cluster_hops.cu > $ROOT/build.log 2>&1 || { tail -30 $ROOT/build.log; exit 1; }
timeout 120 stdbuf -oL /tmp/ch4 20 2>&1 | tee $ROOT/cluster_hops-4.txt
