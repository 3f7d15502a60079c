#!/usr/bin/env bash
# Builds what one device call needs into .gpu/ (under the 64 MiB a call carries): the
# shared pack (release test binaries, bins, examples), then keeps only the test binaries
# that hold GPU tests (`#[ignore = "needs a CUDA GPU"]`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/gpu/pack.sh "$@" >/dev/null
keep=$(grep -rl 'needs a CUDA GPU' --include=*.rs tests model/tests dsl-runtime/tests 2>/dev/null | xargs -n1 basename | sed 's/\.rs$//')
for t in .gpu/bin/test-*; do
  name=${t#.gpu/bin/test-}
  grep -qx "$name" <<<"$keep" || rm -f "$t"
done
cp scripts/bench_peers.py .gpu/ 2>/dev/null || true
cp scripts/dot_peers.py .gpu/     # Triton matmul, torch.matmul, torch SDPA (device_dot.sh)
cp scripts/hf_peers.py .gpu/    # transformers' decode ms/token by context (device_decode.sh)
# The commit the binaries were built from (no .git travels to the device).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > .gpu/commit
ls .gpu/bin | tr '\n' ' '; echo; du -sh .gpu
