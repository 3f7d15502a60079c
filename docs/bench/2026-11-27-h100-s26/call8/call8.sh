#!/usr/bin/env bash
# Session 26 call 8 (11c3bda, the session's default): where the warps stall, per SASS
# instruction (Nsight Compute on the 4th decode launch at 0.6B: scripts/device_ncu.sh).
set -uo pipefail
OUT=${OUT:-/tmp/out} bash scripts/device_ncu.sh 0.6b
gzip -f ${OUT:-/tmp/out}/sass-0.6b.csv 2>/dev/null
rm -f ${OUT:-/tmp/out}/*.safetensors
ls -la ${OUT:-/tmp/out}
