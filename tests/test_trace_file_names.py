"""A trace file somebody else saved: its config names a checkpoint and a module by what they were called where the
trace was made.  Running that config again loads no file and runs no code of this machine until the user names
their own: ``dataclasses.replace(trace.config, checkpoint=PATH)``."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil

import numpy as np
import pytest

import attnviz
from attnviz import models, pipeline, trace_file, user_code
from attnviz.config import AttentionConfig, ConfigError

CONFIG = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=32, seed=5)
TEXT = "the cat and the hat"

MODULE = '''
import pathlib

import torch
from torch import nn

pathlib.Path(__file__).with_name("imported").write_text("this module ran")


class Marker(nn.Module):
    def __init__(self, d_in=16, d_out=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out)
        self.W_key = nn.Linear(d_in, d_out)
        self.W_value = nn.Linear(d_in, d_out)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, d_out) @ (b, d_out, n) -> (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ values  # (b, n, n) @ (b, n, d_out) -> (b, n, d_out)
'''


def with_config(data: bytes, **settings) -> bytes:
    """The trace file ``data`` with its config's ``settings`` changed (what a shared file can say)."""
    with np.load(io.BytesIO(data)) as stored:
        kept = {name: stored[name] for name in stored.files}
    manifest = json.loads(bytes(kept["manifest.json"]))
    manifest["config"].update(settings)
    kept["manifest.json"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **kept)
    return buffer.getvalue()


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    """The user's own module listed in ATTNVIZ_MODULES (attnviz's list starts empty); it writes ``imported`` beside
    itself when it is imported."""
    for name, empty in (("_registered", {}), ("_classes", {}), ("_errors", {}), ("_read", None), ("_failed", {}),
                        ("_stamps", {})):
        monkeypatch.setattr(user_code, name, empty)
    monkeypatch.setattr("sys.argv", ["notebook"])
    (tmp_path / "marker.py").write_text(MODULE)
    monkeypatch.setenv(user_code.ENV, f"{tmp_path / 'marker.py'}:Marker")
    return tmp_path / "imported"


@pytest.mark.parametrize("label", ["Your module: Marker", "anything"])
def test_a_trace_files_module_is_not_imported_or_run_by_running_its_config(own_module, label):
    shared = attnviz.load_trace(with_config(trace_file.trace_npz(pipeline.run(TEXT, CONFIG)), module=label))
    assert shared.config.module == label  # the file's word, as it said it
    with pytest.raises(ConfigError) as refused:
        attnviz.run(shared.text, shared.config)
    message = str(refused.value)
    assert "read from a trace file" in message and f"module={label!r}" in message
    with pytest.raises(ConfigError):
        attnviz.run(shared.text, dataclasses.replace(shared.config, seed=6))  # another setting changed: still its
    assert not own_module.exists(), "a module ran because a trace file named one"


def test_a_module_the_user_names_runs(own_module):
    shared = attnviz.load_trace(with_config(trace_file.trace_npz(pipeline.run(TEXT, CONFIG)),
                                            module="Your module: Marker"))
    again = attnviz.run(shared.text, dataclasses.replace(shared.config, module="Your module: Marker"))
    assert again.module_run.class_name == "Marker"


def test_a_trace_files_checkpoint_is_not_loaded_by_running_its_config(tmp_path, monkeypatch):
    """The file names the checkpoint "bundled"; where a folder of that name is in the working folder, running the
    config loaded it, though nobody named it there."""
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(models.BUNDLED), layer=1))
    shared = attnviz.load_trace(trace_file.trace_npz(trace))
    assert shared.config.checkpoint == "bundled"
    shutil.copytree(models.BUNDLED, tmp_path / "bundled")
    monkeypatch.chdir(tmp_path)
    for config in (shared.config, dataclasses.replace(shared.config, layer=0)):
        with pytest.raises(ConfigError) as refused:
            attnviz.run(shared.text, config)
        message = str(refused.value)
        assert "read from a trace file" in message and "checkpoint='bundled'" in message
    named = attnviz.run(shared.text, dataclasses.replace(shared.config, checkpoint=str(tmp_path / "bundled")))
    assert np.array_equal(named.steps["weights"], trace.steps["weights"])


def test_a_trace_file_of_the_books_classes_runs_again():
    trace = pipeline.run(TEXT, CONFIG)
    shared = attnviz.load_trace(trace_file.trace_npz(trace))
    assert np.array_equal(attnviz.run(shared.text, shared.config).steps["weights"], trace.steps["weights"])
