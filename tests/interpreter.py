"""Running a check script under Triton's CPU interpreter (``TRITON_INTERPRET=1``) in a child process.

Triton 3.6's interpreter cannot run with numpy 2.4 (it turns a one-element array into a Python int, which numpy 2.4
refuses: "only 0-dimensional arrays can be converted to Python scalars"). Where the child fails with exactly that, the
test is skipped and says which versions clash; any other failure fails the test. No pin: a pin on triton or numpy
would move the user's torch or numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMPY_CLASH = "only 0-dimensional arrays can be converted to Python scalars"


def run_interpreted(script: str, payload) -> list:
    """The last stdout line of ``tests/<script>`` (JSON), run under the interpreter with ``payload`` as its argument."""
    triton = pytest.importorskip("triton")
    import numpy

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name(script)), json.dumps(payload)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and NUMPY_CLASH in out.stderr:
        pytest.skip(f"triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__} "
                    f"({NUMPY_CLASH!r}); a triton whose interpreter supports this numpy runs this test")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
