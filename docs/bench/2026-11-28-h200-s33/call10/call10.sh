#!/usr/bin/env bash
# Session 33 call 10 (H200). Binary: main 3cd8561's. The 0.6B group of device_decode.sh:
# transformers eager and compiled (hf_peers.py) on the H200 for the first time, the real-shape
# GPU test, `tessera bench` beside those peers.
set -uo pipefail
timeout 590 bash scripts/device_decode.sh 0.6b
cd ${OUT:-/tmp/out} && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz ./all.tgz
