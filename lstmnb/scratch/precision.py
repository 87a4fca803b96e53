"""The math each from-scratch version's matrix products run in, set and recorded.

The versions table compares implementations of one computation, so every version runs IEEE float32 (or float64,
``ScratchConfig.dtype``): the Numba kernels are plain float32, and ``torch-cuda`` turns off cuDNN's TF32 (its RNN's
default on SM >= 8.0: a 10-bit mantissa, faster and less exact for a reason that is not the implementation) while it
trains. ``engine_backends`` records what ran; TF32's own speed belongs to the training benchmarks (``lstm_math``)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

MATH_LABELS = {"tf32": "TF32", "float32": "float32", "float64": "float64", "float16": "float16"}


def engine_math(version: str) -> AbstractContextManager:
    """While a version trains: for ``torch-cuda``, cuDNN's TF32 off (restored after); others unchanged."""
    if version != "torch-cuda":
        return nullcontext()
    from ..machine.cuda import fp32_math

    return fp32_math("rnn", tf32=False)


def engine_backends(version: str, dtype: Any) -> dict[str, Any]:
    """The record's ``backends`` for a version trained with parameters of ``dtype``: ``math`` ('float64', 'float32' or
    'tf32') and, for ``torch-cuda``, cuDNN and the TF32 switches as they were (call it inside ``engine_math``)."""
    math = "float64" if np.dtype(dtype) == np.float64 else "float32"
    if version != "torch-cuda":
        return {"math": math}
    import torch

    from ..machine.cuda import backends_record

    section = backends_record(torch.device("cuda")) or {}
    if math == "float32":
        math = section.get("lstm_math", math)  # 'tf32' when cuDNN ran it with TF32 allowed
    return {"math": math, **section}
