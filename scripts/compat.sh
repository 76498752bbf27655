#!/usr/bin/env bash
# Run the regression suite against one Ray release, in a venv of its own:
#   scripts/compat.sh RAY_VERSION [pytest args...]     e.g. scripts/compat.sh 2.40.0
#   scripts/compat.sh --install-only RAY_VERSION       only make the venv (CI does
#                                                      this while other jobs run)
#   scripts/compat.sh --compat-tier RAY_VERSION        only the Train V2 session's
#                                                      compat tier (-m compat_tier: the
#                                                      V2 bridge's core; CI runs it on
#                                                      the oldest Train V2 release)
# Runs the whole regression suite, the `extended` tests included (scripts/pytest_sessions.py
# --all: tests/ for Train V1 and tests/v2 for Train V2, side by side; the `large` runs
# over the 512 MiB gRPC limit included: they are ray-project/ray#43234's canary);
# pytest args (-k, -m, --basetemp=...) go to both. On the oldest supported Ray
# (MIN_RAY_VERSION's minor, 2.40), a whole row (no pytest args) then runs the
# release scenarios in smoke mode (scripts/run_release_tests.py --smoke; CI does
# not run them): the run fails if one fails.
# RAY_VERSION is any release ("2.44" takes the pin in constraints/ray-2.44.txt).
# Pins for a known minor come from constraints/ray-MAJOR.MINOR.txt. Prints one
# verdict line last; exit 0 on PASS.
set -uo pipefail
cd "$(dirname "$0")/.."
install_only=0 tier=0
case "${1:-}" in
  --install-only) install_only=1; shift ;;
  --compat-tier) tier=1; shift ;;
esac
[ $# -ge 1 ] || { echo "usage: scripts/compat.sh [--install-only|--compat-tier] RAY_VERSION [pytest args...]" >&2; exit 2; }
version="$1"; shift
minor="$(echo "$version" | cut -d. -f1,2)"
constraints="constraints/ray-$minor.txt"
pins=()
if [ -f "$constraints" ]; then
  while read -r line; do
    case "$line" in ''|'#'*) ;; ray==*) [ "$version" = "$minor" ] && version="${line#ray==}" ;; *) pins+=("$line") ;; esac
  done < "$constraints"
fi
venv="${COMPAT_VENV_DIR:-/tmp}/rtt_compat_ray_$version"
log="$venv.log"
echo "ray $version: venv $venv, pins: ${pins[*]:-none}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import ray, sys, torch, moto, xgboost; sys.exit(ray.__version__!='$version')" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" &&
  scripts/pip_install "$venv/bin/python" -q --upgrade pip > "$log" 2>&1 &&
  scripts/pip_install "$venv/bin/python" -q "ray[tune,train,client]==$version" "${pins[@]}" \
      pytest pytest-timeout hypothesis numpy matplotlib "moto[server]>=5" "xgboost-cpu>=2" \
      -c constraints/test.txt torch >> "$log" 2>&1 ||
    { echo "ray $version: FAIL (could not install; see $log)"; exit 1; }
fi
# The pins again (an existing venv made before a pin was added): a no-op when met.
if [ ${#pins[@]} -gt 0 ]; then
  scripts/pip_install "$venv/bin/python" -q "${pins[@]}" >> "$log" 2>&1 ||
    { echo "ray $version: FAIL (could not install its pins; see $log)"; exit 1; }
fi
# --no-deps: the package's declared range may not include the version under test.
# The lock: an editable install writes ray_tt_ext.egg-info in this checkout, and
# CI runs this beside scripts/install, which takes the same lock.
editable_lock=(env)
command -v flock > /dev/null && editable_lock=(flock /tmp/ray_tt_ext-editable-install.lock)
"${editable_lock[@]}" \
  scripts/pip_install "$venv/bin/python" -q --no-deps -e . >> "$log" 2>&1 ||
  { echo "ray $version: FAIL (could not install ray_tt_ext; see $log)"; exit 1; }
if [ "$install_only" -eq 1 ]; then
  echo "ray $version: installed in $venv"
  exit 0
fi
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
if [ "$tier" -eq 1 ]; then
  # The Train V2 session alone (as scripts/pytest_sessions.py runs it), its compat tier.
  # Its hang guard is 900 s a test, not the suite's 300: on a busy machine (once
  # beside two release smokes, three Rays on two cores) its longest test (8
  # fits, each a death) took 303 s against 100 s alone.
  status=0
  env -u RAY_TRAIN_V2_ENABLED RAY_TT_EXT_TEST_TRAIN=v2 "$venv/bin/python" -m pytest \
    -q -p no:cacheprovider -m compat_tier --timeout 900 tests/v2 "$@" > "$venv.tier.log" 2>&1 || status=$?
  summary="$(grep -E "[0-9]+ (passed|failed)" "$venv.tier.log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
  [ "$status" -eq 0 ] || cat "$venv.tier.log"
  echo "ray $version: $([ "$status" -eq 0 ] && echo PASS || echo FAIL) (compat tier: $summary)"
  exit "$status"
fi
"$venv/bin/python" scripts/pytest_sessions.py --all -q -p no:cacheprovider "$@" 2>&1 | tee "$venv.pytest.log"
status=${PIPESTATUS[0]}
summary="$(grep -E '^== both sessions: ' "$venv.pytest.log" | tail -1 | sed 's/^== both sessions: //;s/ ==$//')"
oldest="$(sed -n 's/^MIN_RAY_VERSION = Version("\([0-9]*\.[0-9]*\)\..*/\1/p' ray_tt_ext/_compat/versions.py)"
[ -n "$oldest" ] || { echo "ray $version: FAIL (MIN_RAY_VERSION unreadable in ray_tt_ext/_compat/versions.py)"; exit 1; }
if [ "$minor" = "$oldest" ] && [ $# -eq 0 ]; then
  # The whole row only (no pytest args): the release scenarios, in smoke mode.
  smoke_status=0
  rm -rf "$venv.release_smokes"
  "$venv/bin/python" scripts/run_release_tests.py --smoke --out "$venv.release_smokes" \
    > "$venv.smoke.log" 2>&1 || smoke_status=$?
  echo "release smokes on ray $version: $(grep -E "passed, [0-9]+ failed" "$venv.smoke.log" | tail -1)"
  if [ "$smoke_status" -ne 0 ]; then
    cat "$venv.smoke.log"
    status=1
    summary="$summary; the release smokes FAILED"
  fi
fi
if [ "$status" -eq 0 ]; then
  echo "ray $version: PASS ($summary)"
else
  echo "ray $version: FAIL ($summary)"
fi
exit "$status"
