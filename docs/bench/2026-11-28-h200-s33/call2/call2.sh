#!/usr/bin/env bash
# Session 33 call 2 (H200): scripts/probe/streamer.cu, new: K streamer SMs that only put the
# next stages' weights into L2, paced by the chain's counter, against the chain alone; twice.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cd scripts/probe
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/streamer streamer.cu 2>&1 | tail -20 || exit 1
echo "=== run 1"; timeout 200 /tmp/streamer; echo rc=$?
echo "=== run 2"; timeout 200 /tmp/streamer; echo rc=$?
