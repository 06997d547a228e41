"""docs/DEPLOY.md's ``TableChoices``: torch's ``LookupTableChoices`` serving an exported table, counting its lookups.
Imports torch alone (``benchmarks/export_check.py`` checks that a table compile loads no ``predictor`` module)."""

from __future__ import annotations

from typing import Any

_TABLE_CHOICES: list[type] = []


def table_choices_class() -> type:
    """docs/DEPLOY.md's ``TableChoices`` (torch's ``LookupTableChoices`` with a ``uuid()``), counting lookups.

    Built once, as a module attribute: torch 2.11 pickles the class into the FX graph cache key, which a class local
    to a function would not survive (the cache would be bypassed)."""
    if not _TABLE_CHOICES:
        from torch._inductor.lookup_table import LookupTableChoices

        class TableChoices(LookupTableChoices):
            counts: dict[str, Any] = {"hits": 0, "misses": 0, "missed": []}

            def uuid(self) -> str:  # torch 2.13's FX graph cache key asks the choices handler for one
                return "lookup-table"

            # counting only (production needs neither): a hit builds the table's choices, a miss that leaves any
            # choice (Inductor also asks for template lists that come out empty) falls back to stock max-autotune
            def _create_lookup_choices(self, *args, **kwargs):
                TableChoices.counts["hits"] += 1
                return super()._create_lookup_choices(*args, **kwargs)

            def _fallback(self, template_choices, kernel_inputs, templates, op_name, kwarg_overrides=None):
                out = super()._fallback(template_choices, kernel_inputs, templates, op_name, kwarg_overrides)
                if out:
                    TableChoices.counts["misses"] += 1
                    TableChoices.counts["missed"].append(f"{op_name}: {[t.uid for t in templates]}")
                return out

        TableChoices.__qualname__ = "TableChoices"
        globals()["TableChoices"] = TableChoices
        _TABLE_CHOICES.append(TableChoices)
    return _TABLE_CHOICES[0]
