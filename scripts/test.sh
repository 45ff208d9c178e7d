#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the tests.
#   scripts/test.sh          everything: fast tests, doctests, then the slow end-to-end tests (CI runs this)
#   scripts/test.sh --fast   the everyday run (slow tests skipped)
# Extra arguments go to pytest. Ends with one line per stage run (passed, or failed with pytest's exit code);
# when the fast tests fail, the slow ones are not run, and it says so. Exit code: the first failing stage's.
# Tests that need the public BIG-bench / BLiMP files read them from $CKPTGEO_PUBLIC_DATA or ../shared/data and
# are skipped (with what is missing and how to get it) where absent; CKPTGEO_REQUIRE_PUBLIC_DATA=1 makes that a
# failure (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
export CKPTGEO_NO_PROGRESS=1
fast_only=0
if [ "${1:-}" = "--fast" ]; then
  fast_only=1
  shift
fi
status() {
  case "$1" in
    0) echo "passed" ;;
    2|130) echo "INTERRUPTED (pytest exit $1: Ctrl-C, or an error while collecting the tests)" ;;
    *) echo "FAILED (pytest exit $1)" ;;
  esac
}
fast=0
python -m pytest -q "$@" || fast=$?
if [ "$fast_only" -eq 1 ]; then
  echo "scripts/test.sh: fast tests and doctests $(status $fast); slow tests skipped (--fast)"
  exit "$fast"
fi
if [ "$fast" -ne 0 ]; then
  echo "scripts/test.sh: fast tests and doctests $(status $fast); slow tests NOT RUN ($([ "$fast" -eq 2 ] || [ "$fast" -eq 130 ] && echo "rerun to finish" || echo "fix the fast ones first"))"
  exit "$fast"
fi
slow=0
python -m pytest -q -m slow tests "$@" || slow=$?
echo "scripts/test.sh: fast tests and doctests $(status $fast); slow tests $(status $slow)"
exit "$slow"
