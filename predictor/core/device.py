"""Device properties the features and spaces need, read from dataset/model metadata (never guessed from magic numbers)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


_FIELD_TYPES: dict[str, tuple[type, ...]] = {"gpu": (str,), "cc": (str,), "sm_count": (int,), "smem_per_block": (int,),
                                            "l2_bytes": (int,), "mem_bandwidth_gbs": (int, float)}
_KIND_NAMES = {(str,): "a string", (int,): "an integer", (int, float): "a number"}


@dataclass(frozen=True)
class DeviceInfo:
    gpu: str
    cc: str
    sm_count: int
    smem_per_block: int  # bytes, opt-in maximum per block
    l2_bytes: int
    mem_bandwidth_gbs: float  # measured device-to-device copy bandwidth
    # measured dense matmul throughput per input dtype, TFLOP/s (e.g. {"float16": 650.0})
    peak_tflops: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> "DeviceInfo":
        """Build from a dataset's or model's metadata dict (key ``device``)."""
        dev = meta.get("device")
        if not isinstance(dev, dict):
            raise ValueError("metadata has no 'device' section (gpu, cc, sm_count, smem_per_block, ...)")
        missing = [k for k in ("gpu", "cc", "sm_count", "smem_per_block", "l2_bytes", "mem_bandwidth_gbs") if k not in dev]
        if missing:
            raise ValueError(f"metadata 'device' section lacks {', '.join(missing)}")
        for key, kinds in _FIELD_TYPES.items():
            value = dev.get(key)
            if key in dev and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise ValueError(f"metadata 'device' {key} is {value!r}, not {_KIND_NAMES[kinds]}")
        peaks = dev.get("peak_tflops", {})
        if not isinstance(peaks, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in peaks.values()):
            raise ValueError(f"metadata 'device' peak_tflops is {peaks!r}, not an object of numbers per dtype")
        return cls(**{k: dev[k] for k in cls.__dataclass_fields__ if k in dev})

    @classmethod
    def from_torch(cls, index: int = 0, mem_bandwidth_gbs: float = 0.0, peak_tflops: dict | None = None) -> "DeviceInfo":
        import torch

        props = torch.cuda.get_device_properties(index)
        return cls(
            gpu=props.name,
            cc=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            smem_per_block=int(getattr(props, "shared_memory_per_block_optin", 0)),
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
            mem_bandwidth_gbs=mem_bandwidth_gbs,
            peak_tflops=dict(peak_tflops or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def same_gpu(self, other: "DeviceInfo") -> bool:
        return self.gpu == other.gpu and self.cc == other.cc

    def same_architecture(self, other: "DeviceInfo") -> bool:
        """Same compute capability, SM count and shared memory per block (e.g. H100 SXM and H200): the tile,
        wave and shared-memory arithmetic a ranking rests on is identical; only bandwidth and clocks differ."""
        return (self.cc == other.cc and self.sm_count == other.sm_count
                and self.smem_per_block == other.smem_per_block)
