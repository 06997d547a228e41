#!/usr/bin/env bash
# What a newcomer does, on this machine: a fresh clone of this repository, a fresh virtual environment, the
# README's two command blocks exactly as written (try it, then the tests), so pip takes the newest releases of every
# dependency. Prints the versions it got and the last lines of each block's output; exits non-zero if either fails.
#
#   bash tests/fresh_machine.sh            # the committed HEAD of this checkout
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gemm-predictor-fresh.XXXXXX")"
git clone -q "$repo" "$work/clone" || exit 1
cd "$work/clone" || exit 1
python3 -m venv "$work/venv" || exit 1
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
status=0
for block in 1 2; do
  commands="$(python .ci/readme_commands.py "$block")" || exit 1
  echo "+ $commands"
  bash -o pipefail -c "$commands" >"$work/block$block.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  tail -n 4 "$work/block$block.log"
  echo "(README block $block: exit $rc; full output in $work/block$block.log)"
done
python -c 'import numpy, pytest, torch
try:
    import triton
except ImportError:
    triton = None
print(f"torch {torch.__version__}, numpy {numpy.__version__}, pytest {pytest.__version__}, "
      f"triton {triton.__version__ if triton else None}")'
exit $status
