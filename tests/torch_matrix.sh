#!/usr/bin/env bash
# The CPU suite on the newest patch of each supported torch minor, each in a fresh virtual environment of its own.
#
#   bash tests/torch_matrix.sh                 # 2.11 2.12 2.13 2.14
#   bash tests/torch_matrix.sh 2.11 2.14       # some of them
#
# Each minor's environment: `pip install "torch==<minor>.*"` (pip picks its newest patch; where PyPI has only CUDA
# builds they are large, and they run the CPU suite all the same), then the package with its test extra, then the
# README's test command. The environments live under $TORCH_MATRIX_DIR (default: a folder in $TMPDIR) and are made
# anew on each run (TORCH_MATRIX_STEP=install makes them and stops; TORCH_MATRIX_STEP=test runs the suites in the
# environments made before). Prints one line per version: the torch installed and pytest's summary. Exits non-zero
# when any version's suite fails.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${TORCH_MATRIX_DIR:-${TMPDIR:-/tmp}/gemm-predictor-torch-matrix}"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.11 2.12 2.13 2.14)
python="${PYTHON:-python3}"
step="${TORCH_MATRIX_STEP:-all}"
mkdir -p "$base"
summary=()
status=0
for minor in "${versions[@]}"; do
  venv="$base/venv-$minor"
  log="$base/torch-$minor.log"
  if [ "$step" != test ]; then
    rm -rf "$venv"
    {
      "$python" -m venv "$venv" &&
        "$venv/bin/python" -m pip install -q "torch==$minor.*" &&
        "$venv/bin/python" -m pip install -q -e "$repo[dev]"
    } >"$log" 2>&1
    if [ $? -ne 0 ]; then
      summary+=("torch $minor: install failed (see $log)")
      status=1
      continue
    fi
    if [ "$step" = install ]; then
      echo "torch $minor: installed in $venv"
      continue
    fi
  fi
  installed="$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>>"$log")"
  (cd "$repo" && "$venv/bin/python" -m pytest -q -n 2 -p no:cacheprovider) >>"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  # pytest's closing line, e.g. "1005 passed, 100 skipped in 301.2s"
  line="$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')"
  summary+=("torch $installed: ${line:-no pytest summary (rc $rc, see $log)}")
  echo "${summary[-1]}"
done
echo "--- torch matrix ---"
printf '%s\n' "${summary[@]}"
exit $status
