"""Run by tests/test_few_rows.py in a subprocess with TRITON_INTERPRET=1 (must be set before triton loads): the
few-rows kernel against the fp32 product, one relative error per case (fp16: the interpreter has no bf16)."""

import json
import sys

import torch

from predictor.runtime.lowerings.few_rows_kernel import few_rows_linear

errors = []
for case in json.loads(sys.argv[1]):
    torch.manual_seed(0)
    x = torch.randn(case["m"], case["k"], dtype=torch.float16)
    w = torch.randn(case["n"], case["k"], dtype=torch.float16) / case["k"] ** 0.5
    bias = torch.randn(case["n"], dtype=torch.float16) if case["bias"] else None
    out = few_rows_linear(x, w, bias, 16, case["block_n"], case["block_k"], 4, 3)
    ref = x.float() @ w.float().t() + (bias.float() if bias is not None else 0)
    errors.append(((out.float() - ref).norm() / ref.norm()).item() if out.shape == ref.shape else float("inf"))
print(json.dumps(errors))
