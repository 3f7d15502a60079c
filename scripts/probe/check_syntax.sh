#!/usr/bin/env bash
# The probes checked as C++ here, without nvcc (none on the development machine): each .cu with
# its launches' <<<...>>> taken out, parsed and type-checked by g++ against host_shim/, a few
# declarations standing in for the CUDA headers. It catches what an edit breaks in C++ (a name,
# a type, a template argument) before a device call spends minutes on it; not the PTX in the
# asm strings, and nothing about what the code does.
#   bash scripts/probe/check_syntax.sh [NAME...]   (default: every probe)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=($(cd "$here" && ls *.cu | sed 's/\.cu$//'))
rc=0
for n in "${names[@]}"; do
  python3 -c 'import re, sys; sys.stdout.write(re.sub(r"<<<.*?>>>", "", open(sys.argv[1]).read(), flags=re.S))' \
    "$here/$n.cu" > "$tmp/$n.cpp"
  if g++ -std=c++17 -fsyntax-only -w -I"$here/host_shim" -I"$here" "$tmp/$n.cpp" 2> "$tmp/$n.err"; then
    echo "ok      $n"
  else
    echo "FAILED  $n"; grep -m 8 error "$tmp/$n.err"; rc=1
  fi
done
exit $rc
