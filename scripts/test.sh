#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the tests.
#   scripts/test.sh          everything: fast tests, doctests, then the slow end-to-end tests (CI runs this)
#   scripts/test.sh --fast   the everyday run (slow tests skipped)
# Extra arguments go to pytest.
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
