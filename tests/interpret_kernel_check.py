"""Run by tests/test_bulk_kernel.py in a subprocess with TRITON_INTERPRET=1 (must be set before triton loads)."""

import json
import sys

import torch

from collectors.runners import make_operands, make_runner, relative_error
from predictor.core.candidate import Candidate
from predictor.core.problem import Problem

cases = json.loads(sys.argv[1])
errors = []
for case in cases:
    p = Problem(**case["problem"])
    c = Candidate("triton_mm", *case["tile"])
    ops = make_operands(p, torch.device("cpu"), seed=1)
    ops.out.fill_(float("nan") if ops.out.is_floating_point() else -1)
    make_runner(p, c, ops, num_sms=4)()
    errors.append(relative_error(ops.out, ops.reference))
print(json.dumps(errors))
