#!/usr/bin/env bash
# Builds what one device call needs into .gpu/ (git-ignored; a call carries at most 64 MiB),
# here, on the development machine (no GPU, no CUDA toolkit needed):
# - bin/test-NAME: the release test binaries that hold GPU tests
#   (`#[ignore = "needs a CUDA GPU"]`); the others are dropped to keep .gpu small;
# - bin/tessera and bin/EXAMPLE: the binary and the examples, release, stripped;
# - device-env.sh (sourced there first), hf_reference.py, hf_peers.py, bench_peers.py;
# - origin (this tree's path, which test binaries bake in through CARGO_MANIFEST_DIR;
#   device-env.sh links it to the carried tree) and commit (no .git travels).
# Cargo flags pass through, e.g. `scripts/pack_gpu.sh -p model`.
# Then: device run with carry [".gpu"], command starting `source .gpu/device-env.sh;`
# (scripts/device_run.sh and scripts/device_decode.sh do). The device machine is x86-64
# with a newer glibc, so these binaries run there.
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything but the calls' scripts (.gpu/callN.sh: a repack between calls keeps them).
mkdir -p .gpu
find .gpu -mindepth 1 -maxdepth 1 ! -name 'call*.sh' -exec rm -rf {} +
mkdir -p .gpu/bin
cp scripts/device-env.sh scripts/hf_reference.py scripts/hf_peers.py scripts/bench_peers.py .gpu/
pwd > .gpu/origin

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The executables cargo reports, as NAME PATH, for test (arg 1 = True) or other targets.
executables() {
  python3 -c '
import json, sys
want_test = sys.argv[1] == "True"
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] == want_test:
        print(m["target"]["name"], m["executable"])' "$1"
}
build_failed() {
  echo "pack_gpu.sh: cargo failed; its output:" >&2
  cat "$log" >&2
  exit 1
}
cargo test --workspace --release --no-run --message-format=json "$@" 2>"$log" >"$log.json" || build_failed
executables True <"$log.json" | while read -r name exe; do cp "$exe" ".gpu/bin/test-$name"; done
cargo build --workspace --release --bins --examples --message-format=json "$@" 2>"$log" >"$log.json" || build_failed
executables False <"$log.json" | while read -r name exe; do cp "$exe" ".gpu/bin/$name"; done
rm -f "$log.json"
strip .gpu/bin/* 2>/dev/null || true

# Keep only the test binaries that hold GPU tests.
keep=$(grep -rl 'needs a CUDA GPU' --include=*.rs tests model/tests dsl-runtime/tests 2>/dev/null | xargs -n1 basename | sed 's/\.rs$//')
for t in .gpu/bin/test-*; do
  name=${t#.gpu/bin/test-}
  grep -qx "$name" <<<"$keep" || rm -f "$t"
done
cp scripts/dot_peers.py .gpu/  # Triton matmul, torch.matmul, torch SDPA (device_dot.sh)
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > .gpu/commit
ls .gpu/bin | tr '\n' ' '; echo; du -sh .gpu
# A device call carries at most 64 MiB, the working tree (~21 MB) included.
mb=$(du -sm .gpu | cut -f1)
if (( mb > 40 )); then
  echo "pack_gpu.sh: .gpu is ${mb} MB, too much to carry beside the tree: remove the binaries this call does not run (largest: $(ls -S .gpu/bin | head -4 | tr '\n' ' '))" >&2
fi
