"""The float32 math switches under torch >= 2.9's ``fp32_precision`` API (issue 48, item 2). On torch 2.13,
once the process set that API so that it disagrees with a legacy switch, reading the legacy one
(``torch.backends.cuda.matmul.allow_tf32``, ``torch.get_float32_matmul_precision()``,
``torch.backends.cudnn.allow_tf32``) raises, on a CPU build too: a record written in ``Trainer.finish``,
the MFU reference and the scratch versions' engine read them."""

from __future__ import annotations

import pytest
import torch

from lstmnb.machine import cuda
from lstmnb.experiments.speed import matmul_rate
from lstmnb.scratch.precision import engine_math


@pytest.fixture
def new_api():
    """The new API's leaves, put back after the test (which makes the legacy reads work again)."""
    nodes = [
        torch.backends.cuda.matmul,
        getattr(torch.backends.cudnn, "rnn", None),
        getattr(torch.backends.cudnn, "conv", None),
    ]
    if not all(hasattr(n, "fp32_precision") for n in nodes):
        pytest.skip("torch < 2.9: no fp32_precision API")
    before = [n.fp32_precision for n in nodes]
    yield
    for n, value in zip(nodes, before):
        n.fp32_precision = value
    torch.backends.cuda.matmul.allow_tf32  # noqa: B018 (the legacy reads work again)


def test_reading_the_switches_never_raises_after_the_new_api_set_them(new_api):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.rnn.fp32_precision = "ieee"
    with pytest.raises(RuntimeError, match="legacy and new APIs"):  # what torch does, the reason for all this
        torch.backends.cuda.matmul.allow_tf32  # noqa: B018
    flags = cuda.precision_flags()
    assert flags["matmul_fp32_precision"] == "tf32" and flags["cudnn_rnn_fp32_precision"] == "ieee"
    assert flags["matmul_allow_tf32"] is None and flags["float32_matmul_precision"] is None
    assert flags["cudnn_allow_tf32"] is None  # conv tf32 and rnn ieee: torch refuses one answer for both
    assert cuda.rnn_tf32(flags) is False
    torch.backends.cudnn.rnn.fp32_precision = "tf32"
    assert cuda.rnn_tf32(cuda.precision_flags()) is True


def test_the_mfu_reference_sets_and_restores_the_matmul_math_through_the_new_api(new_api):
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # torch.get_float32_matmul_precision() now raises
    assert matmul_rate("cpu", size=8, repeats=1, precision="float32") > 0
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_the_scratch_engine_turns_the_rnns_tf32_off_through_the_new_api(new_api):
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # rnn stays tf32: the legacy cudnn.allow_tf32 read raises
    with engine_math("torch-cuda"):
        assert torch.backends.cudnn.rnn.fp32_precision == "ieee"
        assert cuda.rnn_tf32(cuda.precision_flags()) is False
    assert torch.backends.cudnn.rnn.fp32_precision == "tf32"


def test_fp32_math_uses_the_legacy_switches_where_the_new_api_is_missing(monkeypatch):
    monkeypatch.setattr(cuda, "_fp32_node", lambda op: None)  # torch < 2.9
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    with cuda.fp32_math("matmul", True), cuda.fp32_math("rnn", False):
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32 is False
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before
