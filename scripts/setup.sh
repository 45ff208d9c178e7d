#!/usr/bin/env bash
# Create .venv (if missing) and install ckptgeo with its test extras. Idempotent.
# torch is installed first as the CPU build pinned here, so no multi-GB CUDA build is pulled in;
# set CKPTGEO_TORCH to another spec (e.g. "torch==2.13.0" from a CUDA index) on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install -q "${CKPTGEO_TORCH:-torch==2.13.0}"
python -m pip install -q -e ".[test]"
echo "ckptgeo installed in $(pwd)/.venv ($(python -c 'import torch; print("torch", torch.__version__)'))"
