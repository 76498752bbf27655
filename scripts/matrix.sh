#!/usr/bin/env bash
# The whole Ray matrix, one verdict per version; results in compat_results/matrix.txt.
#   scripts/matrix.sh [RAY_VERSION ...]   (default: every constraints/ray-*.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for f in constraints/ray-*.txt; do v="${f#constraints/ray-}"; versions+=("${v%.txt}"); done
fi
mkdir -p compat_results
: > compat_results/matrix.txt
for v in "${versions[@]}"; do
  scripts/compat.sh "$v" | tail -1 | tee -a compat_results/matrix.txt
done
echo; cat compat_results/matrix.txt
! grep -q ": FAIL" compat_results/matrix.txt
