#!/usr/bin/env bash
# Session 30 call 6 (call 5 with warp 0 writing nothing: its thread 0 only polls and passes the news on; the probe as at 1e8cea3): the hop probe (scripts/probe/cluster_hops.cu, 8 modes: the hop as the
# generated kernel makes it, two cluster signals, and the weights loaded before the wait:
# registers, shared memory, one stage ahead), built here with nvcc (NVRTC 13 on the
# development machine crashed in its optimiser on it; -O fallbacks below).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
"$nv" --version | tail -2
for cl in 8 4; do
  built=""
  for opt in "-O3" "-Xcicc -O2" "-Xcicc -O1"; do
    if "$nv" $opt -DCL=$cl -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch$cl scripts/probe/cluster_hops.cu > $ROOT/ch$cl-build.log 2>&1; then built="$opt"; break; fi
    echo "build with $opt failed:"; tail -5 $ROOT/ch$cl-build.log
  done
  [[ -n $built ]] || continue
  echo "=== [$(date +%T)] clusters of $cl (built with $built)"
  timeout 120 /tmp/ch$cl 20 2>&1 | tee $ROOT/cluster_hops-$cl.txt
done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
