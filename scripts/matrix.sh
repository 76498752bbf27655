#!/usr/bin/env bash
# The whole Ray matrix, one row per Ray minor; writes docs/compatibility.{md,tsv}.
#   scripts/matrix.sh [--fresh] [RAY_VERSION ...]   (default: every constraints/ray-*.txt)
# Each row is scripts/compat.sh VERSION (the whole regression suite, Train V1 and
# Train V2 sessions, in a venv of its own; on Ray 2.40, the oldest supported, the
# release smokes after it) with its wall time. Unattended and
# resumable: a row's verdict is kept in compat_results/rows/VERSION.txt with the
# commit and the code it ran (the working tree's files, committed or not, but the
# matrix's own outputs and the CHANGELOG: scripts/render_compatibility.py --code),
# and a row that passed on this code is not run again (one that failed or was cut
# short is); --fresh runs every row. Rows of
# versions not run this time are kept from docs/compatibility.tsv. The page's
# passing minors become MATRIX_RAN, from which RAY_OVERRIDES' `checked` ranges
# are derived (scripts/render_compatibility.py). Exit 0 when every row passes
# and the map agrees with the rows written (tests/test_compat_map.py).
set -uo pipefail
cd "$(dirname "$0")/.."
fresh=0
if [ "${1:-}" = "--fresh" ]; then fresh=1; shift; fi
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for f in constraints/ray-*.txt; do v="${f#constraints/ray-}"; versions+=("${v%.txt}"); done
fi
commit="$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)"
# The code a row runs: the working tree's files, but the matrix's own outputs.
code="$(python3 scripts/render_compatibility.py --code)" || exit 1
mkdir -p compat_results/rows docs
for v in "${versions[@]}"; do
  row="compat_results/rows/$v.txt"
  if [ "$fresh" -eq 0 ] && passed="$(python3 scripts/render_compatibility.py --done "$v" "$code")"; then
    echo "=== ray $v: done on this code ($passed)" >&2
    # The page is rendered from the row files: one found on the committed page
    # only (or on it newer than this checkout's file) gets its file.
    [ "$(head -1 "$row" 2>/dev/null)" = "$passed" ] || printf '%s\n' "$passed" > "$row"
    continue
  fi
  echo "=== ray $v ($(date +%H:%M:%S))" >&2
  start=$(date +%s)
  verdict="$(RTT_MATRIX_ROW=1 scripts/compat.sh "$v" | tail -1)"
  status=$?  # compat.sh's (pipefail)
  seconds=$(( $(date +%s) - start ))
  # No verdict line (compat.sh cut short): a failed row, never an old one kept.
  if ! [[ "$verdict" =~ ^ray\ [0-9.]+:\ (PASS|FAIL) ]] ||
     { [ "$status" -ne 0 ] && [[ "$verdict" == *": PASS"* ]]; }; then
    verdict="ray $v: FAIL (no verdict: scripts/compat.sh exited $status)"
  fi
  printf '%s in %s s on %s at %s code %s\ncommit %s\ncode %s\n' "$verdict" "$seconds" \
    "$(date +%F)" "$commit" "$code" "$commit" "$code" > "$row"
  head -1 "$row"
done
: > compat_results/matrix.txt
for v in "${versions[@]}"; do head -1 "compat_results/rows/$v.txt" >> compat_results/matrix.txt; done
python3 scripts/render_compatibility.py compat_results/matrix.txt
echo; cat compat_results/matrix.txt
! grep -q ": FAIL" compat_results/matrix.txt || exit 1
# RAY_OVERRIDES' `checked` against the rows just written (skipped in each row).
# A clone without .venv: the venv of the last row run (scripts/compat.sh's).
newest=".venv/bin/python"
if ! [ -x "$newest" ]; then
  last="${versions[${#versions[@]}-1]}"
  newest="$(ls -d "${COMPAT_VENV_DIR:-/tmp}/rtt_compat_ray_$last"* 2>/dev/null | grep -v '\.log$' | sort -V | tail -1)/bin/python"
fi
"$newest" -m pytest -q -p no:cacheprovider tests/test_compat_map.py -k checked_is_what
