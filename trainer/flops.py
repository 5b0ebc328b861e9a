"""Peak dense FLOP/s per device (no sparsity), for MFU. Matched on the CUDA device name."""

from __future__ import annotations

import torch

# name fragment -> TFLOP/s for (bf16, fp16, tf32, fp32); first match wins, so specific names first.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("GB200", {"bf16": 2500, "fp16": 2500, "tf32": 1250, "fp32": 80}),
    ("B200", {"bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 80}),
    ("H200", {"bf16": 989, "fp16": 989, "tf32": 494, "fp32": 67}),
    ("H100 PCIe", {"bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51}),
    ("H100 NVL", {"bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60}),
    ("H100", {"bf16": 989, "fp16": 989, "tf32": 494, "fp32": 67}),
    ("H800", {"bf16": 989, "fp16": 989, "tf32": 494, "fp32": 67}),
    ("GH200", {"bf16": 989, "fp16": 989, "tf32": 494, "fp32": 67}),
    ("A100", {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5}),
    ("A800", {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5}),
    ("L40S", {"bf16": 362, "fp16": 362, "tf32": 183, "fp32": 91.6}),
    ("L40", {"bf16": 181, "fp16": 181, "tf32": 90.5, "fp32": 90.5}),
    ("L4", {"bf16": 121, "fp16": 121, "tf32": 60, "fp32": 30.3}),
    ("A10G", {"bf16": 70, "fp16": 70, "tf32": 35, "fp32": 31.2}),
    ("A10", {"bf16": 125, "fp16": 125, "tf32": 62.5, "fp32": 31.2}),
    ("A6000", {"bf16": 155, "fp16": 155, "tf32": 77, "fp32": 38.7}),
    ("RTX 6000 Ada", {"bf16": 364, "fp16": 364, "tf32": 182, "fp32": 91}),
    ("4090", {"bf16": 165, "fp16": 165, "tf32": 82.6, "fp32": 82.6}),
    ("3090", {"bf16": 71, "fp16": 71, "tf32": 35.6, "fp32": 35.6}),
    ("V100", {"bf16": 0, "fp16": 125, "tf32": 0, "fp32": 15.7}),
    ("T4", {"bf16": 0, "fp16": 65, "tf32": 0, "fp32": 8.1}),
    ("MI300X", {"bf16": 1307, "fp16": 1307, "tf32": 654, "fp32": 163}),
    ("MI250", {"bf16": 362, "fp16": 362, "tf32": 0, "fp32": 95.7}),
]


def set_tf32(enabled: bool) -> None:
    """``--tf32``: let fp32 matmuls (and cuDNN convolutions) run on TF32 tensor cores, or keep full fp32.
    Process-wide, set before the model runs; it changes nothing on the CPU."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def precision_key(dtype: torch.dtype, tf32: bool | None = None) -> str:
    """The peak-rate column for matmuls in ``dtype``: fp32 matmuls count at the TF32 peak when TF32 is
    on (``tf32``; None: as torch is set now)."""
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if tf32 is None:
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    return "tf32" if tf32 else "fp32"


def peak_flops(device_name: str, dtype: torch.dtype, tf32: bool | None = None) -> float | None:
    """Peak FLOP/s of one device for this precision, or None if unknown (e.g. CPU)."""
    key = precision_key(dtype, tf32)
    for fragment, table in PEAK_TFLOPS:
        if fragment.lower() in device_name.lower():
            value = table.get(key) or 0
            return value * 1e12 if value else None
    return None
