#!/usr/bin/env bash
# The whole Ray matrix, one verdict per version; writes docs/compatibility.md.
#   scripts/matrix.sh [RAY_VERSION ...]   (default: every constraints/ray-*.txt)
# Rows of versions not run this time are kept from docs/compatibility.tsv.
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for f in constraints/ray-*.txt; do v="${f#constraints/ray-}"; versions+=("${v%.txt}"); done
fi
mkdir -p compat_results docs
: > compat_results/matrix.txt
for v in "${versions[@]}"; do
  echo "=== ray $v ($(date +%H:%M:%S))" >&2
  scripts/compat.sh "$v" | tail -1 | tee -a compat_results/matrix.txt
done
python3 scripts/render_compatibility.py compat_results/matrix.txt
echo; cat compat_results/matrix.txt
! grep -q ": FAIL" compat_results/matrix.txt
