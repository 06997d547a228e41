"""Run by tests/test_scaled_bulk.py in a subprocess with TRITON_INTERPRET=1 (must be set before triton loads).

For each case: the scaled kernel's relative error against the fp32 reference and, where the case's "aten" is true,
against torch._scaled_mm (CPU); null where it is false."""

import json
import sys

import torch
import triton

from collectors.runners import FP8_FAST_ACCUM, make_operands, make_runner, relative_error
from predictor.core.candidate import Candidate
from predictor.core.problem import Problem

# the persistent TMA kernel builds its tensor descriptors on the device side, which needs a scratch allocator
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
cases = json.loads(sys.argv[1])
errors = []
for case in cases:
    p = Problem(**case["problem"], dtype="float8_e4m3fn", layout_b="col")
    c = Candidate(case["family"], *case["tile"])
    ops = make_operands(p, torch.device("cpu"), seed=1)
    aten = None
    if case["aten"]:
        aten = torch._scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, out_dtype=ops.out.dtype,
                                use_fast_accum=FP8_FAST_ACCUM)
    ops.out.fill_(float("nan"))  # an unwritten element fails
    make_runner(p, c, ops, num_sms=case.get("num_sms", 4))()
    errors.append({"reference": relative_error(ops.out, ops.reference),
                   "aten": None if aten is None else relative_error(ops.out, aten)})
print(json.dumps(errors))
