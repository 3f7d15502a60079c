#!/usr/bin/env bash
# Session 33 call 11 (H200): scripts/probe/hop_bound.cu (streamer.cu renamed, with
# `step_chain`: the generated 0.6B step's own sync pattern and atomics, sums for arithmetic);
# twice.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cd scripts/probe
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hop_bound hop_bound.cu 2>&1 | tail -20 || exit 1
echo "=== run 1"; timeout 200 /tmp/hop_bound; echo rc=$?
echo "=== run 2"; timeout 200 /tmp/hop_bound; echo rc=$?
