"""Problem: one GEMM instance, the unit every dataset row, split and metric is grouped by."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

# ``torch._scaled_mm`` (fp8) is one op to Inductor, but tensorwise and rowwise scales run different kernels
# (cuBLASLt vs CUTLASS rowwise in aten; another epilogue in Triton), so the scale kind is part of the op: the
# smallest change that keeps every existing problem_id and dataset column as it was.
SCALED_OPS = ("scaled_mm_tensorwise", "scaled_mm_rowwise")
OPS = ("mm", "addmm", "bmm", "int_mm", *SCALED_OPS)
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
DTYPES = ("float16", "bfloat16", "float32", "int8", *FP8_DTYPES)
LAYOUTS = ("row", "col")
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1, "int32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}
# fp8 GEMMs write bf16 (what torchao and fp8 training ask _scaled_mm for); its own default, fp8 out, is rare
FP8_DEFAULT_OUT = "bfloat16"


def default_out_dtype(dtype: str) -> str:
    """The output dtype a problem of input ``dtype`` has unless stated: int32 for int8, bf16 for fp8."""
    return "int32" if dtype == "int8" else FP8_DEFAULT_OUT if dtype in FP8_DTYPES else dtype


@dataclass(frozen=True)
class Problem:
    """A GEMM C[b, m, n] = A[b, m, k] @ B[b, k, n].

    ``layout_a``/``layout_b`` say whether the operand is stored transposed: ``row`` means the
    inner (k for A, n for B) dimension is contiguous, ``col`` means it is the transpose of a
    contiguous tensor (``F.linear`` gives B ``col``; weight gradients give A ``col``).
    ``align`` is the largest power of two <= 16 bytes dividing every stride and base, 0 = unknown.
    """

    op: str
    m: int
    n: int
    k: int
    dtype: str
    b: int = 1
    out_dtype: str = ""
    layout_a: str = "row"
    layout_b: str = "row"
    align: int = 0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; expected one of {', '.join(OPS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")
        for name in ("b", "m", "n", "k"):
            value = getattr(self, name)
            if int(value) != value or value <= 0:
                raise ValueError(f"problem size {name}={value!r} must be a positive integer")
        for name in ("layout_a", "layout_b"):
            if getattr(self, name) not in LAYOUTS:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; expected row or col")
        if (self.op == "int_mm") != (self.dtype == "int8"):
            raise ValueError(f"op {self.op} does not take dtype {self.dtype} (int8 goes with int_mm only)")
        if (self.op in SCALED_OPS) != (self.dtype in FP8_DTYPES):
            raise ValueError(f"op {self.op} does not take dtype {self.dtype} (fp8 goes with the scaled_mm ops only)")
        if not self.out_dtype:
            object.__setattr__(self, "out_dtype", default_out_dtype(self.dtype))
        if self.op != "bmm" and self.b != 1:
            raise ValueError(f"op {self.op} has no batch dimension, got b={self.b}")

    @property
    def problem_id(self) -> str:
        return problem_id(**asdict(self))

    def to_dict(self) -> dict:
        return {**asdict(self), "problem_id": self.problem_id}

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def problem_id(op: str, b: int, m: int, n: int, k: int, dtype: str, out_dtype: str,
               layout_a: str, layout_b: str, align: int = 0) -> str:
    """Stable 12-hex id; the same fields in the same order forever (datasets depend on it)."""
    text = f"{op}|{int(b)}|{int(m)}|{int(n)}|{int(k)}|{dtype}|{out_dtype}|{layout_a}|{layout_b}|{int(align)}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


PROBLEM_FIELDS = ("op", "b", "m", "n", "k", "dtype", "out_dtype", "layout_a", "layout_b", "align")


def problem_from_row(row) -> Problem:
    """A Problem from a corpus/dataset row: an itertuples namedtuple or a Series (whose ``.align`` is a method)."""
    get = row.__getitem__ if hasattr(row, "iloc") else (lambda f: getattr(row, f))  # a Series, without importing pandas
    return Problem(**{f: (int(get(f)) if f in ("b", "m", "n", "k", "align") else str(get(f))) for f in PROBLEM_FIELDS})
