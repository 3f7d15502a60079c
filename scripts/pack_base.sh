#!/usr/bin/env bash
# Adds a second `tessera` binary, built from another commit, to .gpu/ (after
# scripts/pack_gpu.sh), so that one device call can A/B a candidate that changes the
# kernels' source against the commit before it (docs/PERF.md, session 27's `base`):
#   scripts/pack_base.sh REV [NAME]     (NAME defaults to `base`)
# builds REV's release `tessera` in a temporary worktree (its own target dir, kept for the
# next run: $BASE_TARGET, default target/base), strips it into .gpu/bin/tessera-bin-NAME
# and writes .gpu/bin/tessera-NAME, the wrapper that `scripts/device_ab.sh` and
# `device_ab_reps.sh` run for arm NAME. Each binary is about 11 MiB of the call's 64.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/pack_base.sh REV [NAME]}
name=${2:-base}
[[ -d .gpu/bin ]] || { echo "pack_base.sh: no .gpu/bin: run scripts/pack_gpu.sh first" >&2; exit 1; }
sha=$(git rev-parse --short "$rev^{commit}")
tree=$(mktemp -d)
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git worktree add --detach "$tree" "$sha" >/dev/null 2>&1
target=$(realpath -m "${BASE_TARGET:-target/base}")
(cd "$tree" && CARGO_TARGET_DIR="$target" cargo build --release -p tessera --quiet)
cp "$target/release/tessera" ".gpu/bin/tessera-bin-$name"
strip ".gpu/bin/tessera-bin-$name"
printf '#!/usr/bin/env bash\n# tessera at %s\nexec "$(dirname "$0")/tessera-bin-%s" "$@"\n' "$sha" "$name" > ".gpu/bin/tessera-$name"
chmod +x ".gpu/bin/tessera-$name"
echo "$sha" > ".gpu/commit-$name"
echo ".gpu/bin/tessera-$name: tessera at $sha ($(du -sh .gpu | cut -f1) in .gpu)"
