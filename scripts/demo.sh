#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: `ckptgeo demo` (train a small algorithmic suite on
# the CPU, scan its checkpoints, analyse them). Extra arguments go to `ckptgeo demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
exec ckptgeo demo "$@"
