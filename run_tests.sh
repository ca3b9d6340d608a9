#!/usr/bin/env bash
# Usage: ./run_tests.sh <suite> [extra pytest args]   (./run_tests.sh --list for the suites)
#        ./run_tests.sh --python                      (set up the environment, print its python)
#
# The suites are defined once, in tests/suites.py; this script only prepares a
# Python environment and hands over. On first use it creates .venv (or reuses
# it), installs torch==2.13.0 (the pinned CPU build) when no torch is present,
# and installs the project with its test extra. Set MEGAMOE_PYTHON to use an
# existing interpreter instead (the GPU machine: see docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")"

VENV=${MEGAMOE_VENV:-.venv}
TORCH_PIN=torch==2.13.0

megamoe_python() {
  if [ -n "${MEGAMOE_PYTHON:-}" ]; then
    echo "$MEGAMOE_PYTHON"
    return
  fi
  local py="$VENV/bin/python"
  if [ ! -x "$py" ]; then
    echo "run_tests.sh: creating virtual environment $VENV" >&2
    python3 -m venv "$VENV" >&2
  fi
  if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "run_tests.sh: installing $TORCH_PIN" >&2
    "$py" -m pip install -q "$TORCH_PIN" >&2
  fi
  # Reinstall the project only when its dependency declaration changed.
  local stamp="$VENV/.megamoe-deps" want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "run_tests.sh: installing megamoe[test] into $VENV" >&2
    "$py" -m pip install -q -e '.[test]' >&2
    echo "$want" >"$stamp"
  fi
  echo "$py"
}

case "${1:-}" in
  --python) megamoe_python; exit 0 ;;
  "") set -- --list ;;
esac

PY=$(megamoe_python)
exec "$PY" -m tests.suites "$@"
