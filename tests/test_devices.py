"""Devices: auto picks CUDA, then MPS, then the CPU; a missing or full GPU falls back to the CPU with a note."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.runs import TEXT, assert_traces_equal, small

from attnviz import config as config_module
from attnviz.config import available_devices, resolve_device
from attnviz.pipeline import run
from attnviz.producers import book


def test_cuda_on_a_gpu_less_machine_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device, notes = resolve_device("cuda")
    assert device == "cpu"
    assert len(notes) == 1
    assert "CUDA" in notes[0]
    assert "CPU" in notes[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_run_with_cuda_here_runs_on_cpu_with_a_note():
    trace = run(TEXT, small(device="cuda"))
    assert trace.device == "cpu"
    assert any("CUDA" in note for note in trace.notes)
    assert np.array_equal(trace.output, run(TEXT, small(device="cpu")).output)


def test_the_config_that_ran_holds_the_device_that_ran(monkeypatch):
    """A run asked for CUDA on a machine without it runs on the CPU with one note, and trace.config holds
    device="cpu", so running trace.config again gives the same config and no note; "auto" holds the device it
    picked."""
    monkeypatch.setattr(config_module, "available_devices", lambda: ["auto", "cpu"])
    trace = run(TEXT, small(device="cuda"))
    assert (trace.device, trace.config.device) == ("cpu", "cpu") and len(trace.notes) == 1
    again = run(TEXT, trace.config)
    assert again.notes == () and again.config == trace.config
    assert run(TEXT, small(device="auto")).config.device == "cpu"  # auto: the device it picked


def test_auto_without_accelerators_is_cpu_without_notes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == ("cpu", [])
    assert resolve_device("cpu") == ("cpu", [])
    device, notes = resolve_device("mps")
    assert device == "cpu"
    assert "MPS" in notes[0]
    assert available_devices() == ["auto", "cpu"]


def test_auto_picks_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == ("cuda", [])
    assert resolve_device("cuda") == ("cuda", [])
    assert "cuda" in available_devices()


def test_auto_picks_mps_when_only_mps_is_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == ("mps", [])


def test_cuda_out_of_memory_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_forward = book._forward
    devices = []

    def forward(input_embeddings, config, device):
        devices.append(device)
        if device != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 48.00 MiB")
        return real_forward(input_embeddings, config, device)

    monkeypatch.setattr(book, "_forward", forward)
    trace = run(TEXT, small(device="cuda"))
    assert devices == ["cuda", "cpu"]
    assert trace.device == trace.config.device == "cpu"
    assert len(trace.notes) == 1
    assert "CUDA ran out of memory" in trace.notes[0]
    assert "CPU" in trace.notes[0]
    monkeypatch.undo()
    assert_traces_equal(trace, run(TEXT, small(device="cpu")))


def test_missing_device_falls_back_to_cpu_with_a_notice(monkeypatch):
    monkeypatch.setattr(config_module, "available_devices", lambda: ["auto", "cpu"])
    trace = run("hello", small(device="cuda"))
    assert trace.device == "cpu"
    assert any("CUDA is not available" in note for note in trace.notes)
