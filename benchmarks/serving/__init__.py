"""The serving benchmark: one compile for every size served (dynamic) against a compile per size (static)."""
