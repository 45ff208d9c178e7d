#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the tests.
#   scripts/test.sh          everything: fast tests, doctests, then the slow end-to-end tests (CI runs this)
#   scripts/test.sh --fast   the everyday run (slow tests skipped)
# Extra arguments go to pytest.
# Tests that need the public BIG-bench / BLiMP files read them from $CKPTGEO_PUBLIC_DATA or ../shared/data and
# are skipped (with what is missing and how to get it) where absent; CKPTGEO_REQUIRE_PUBLIC_DATA=1 makes that a
# failure (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
export CKPTGEO_NO_PROGRESS=1
if [ "${1:-}" = "--fast" ]; then
  shift
  exec python -m pytest -q "$@"
fi
python -m pytest -q "$@"
python -m pytest -q -m slow tests "$@"
