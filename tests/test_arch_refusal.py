"""A CUDA GPU whose architecture the torch build lacks is refused before a run starts, in one line
naming the GPU, the build's architectures and the fix; the notebooks record it as skipped (issue 30,
defect 4)."""

from __future__ import annotations

import json

import pytest
import torch

from lstmnb.machine.cuda import arch_problem
from lstmnb.machine.device import resolve_device
from lstmnb.errors import DeviceError
from lstmnb.notebooks import steps
from lstmnb.rules import CLI

# torch.cuda.get_arch_list() of PyTorch's CUDA 12.8 builds (2.7.0: sm_50..sm_70 dropped) and of a CUDA 12.6 build
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@pytest.mark.parametrize("name, cap", [("Tesla P100-PCIE-16GB", (6, 0)), ("Tesla V100-SXM2-32GB", (7, 0))])
def test_old_gpus_are_refused_by_a_cu128_build(name, cap):
    line = arch_problem(name, cap, CU128)
    assert line is not None and "\n" not in line
    assert name in line and f"sm_{cap[0]}{cap[1]}" in line
    assert " ".join(CU128) in line  # the build's architectures
    assert line.endswith("or use device='cpu'") and "12.6" in line  # the fix: a build that has them, or the CPU


@pytest.mark.parametrize("name, cap, arch", [
    ("Tesla P100-PCIE-16GB", (6, 0), CU126), ("Tesla V100-SXM2-32GB", (7, 0), CU126),
    ("Tesla T4", (7, 5), CU128), ("NVIDIA A40", (8, 6), CU128), ("NVIDIA L4", (8, 9), CU128),  # sm_86 SASS runs on 8.9
    ("NVIDIA H100 80GB HBM3", (9, 0), CU128)])
def test_gpus_the_build_has_kernels_for_pass(name, cap, arch):
    assert arch_problem(name, cap, arch) is None


@pytest.fixture
def p100_under_cu128(monkeypatch):
    """This process seen as a host with one P100 and a CUDA 12.8 torch build: torch.cuda's device queries
    answer as that hardware would (the decision and the notebook path under test are lstmnb's own)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(CU128))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (6, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "Tesla P100-PCIE-16GB")


def test_resolve_device_refuses_it_in_one_line(p100_under_cu128):
    for name in ("cuda", "cuda:0", "auto"):
        with pytest.raises(DeviceError) as err:
            resolve_device(name)
        text = str(err.value)
        assert "\n" not in text and "Tesla P100-PCIE-16GB" in text and "sm_75 sm_80" in text
        assert text.startswith(f"device={name if name != 'auto' else 'cuda'!r}: ") and text.endswith("device='cpu'")
    with pytest.raises(DeviceError, match=r"^--device cuda: cuda:0 Tesla P100.*, or use --device cpu$"):
        resolve_device("cuda", CLI)  # as the command line spells it


def test_notebook_gpu_check_records_it_as_skipped(p100_under_cu128, monkeypatch, tmp_path):
    reason = steps.gpu_check("cuda")
    assert reason is not None and "Tesla P100-PCIE-16GB" in reason and "no kernels" in reason
    monkeypatch.undo()  # the record describes this machine as it is (its device section reads real torch)
    cfg = steps.make_config(device="cuda", progress=False, profile="test")
    results = tmp_path / "runs.jsonl"
    record = steps.record_skipped(cfg, reason, results)
    assert record["status"] == "skipped" and record["reason"] == reason
    written = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["status"] for r in written] == ["skipped"] and written[0]["reason"] == reason
