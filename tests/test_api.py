"""The public API: ``attnviz``'s own names are what docs/api.md documents, load on first use, and work."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import attnviz

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {
    "run", "AttentionConfig", "Trace", "trace_module", "check_module", "show", "explain_weight", "kv_cache_bytes",
    "models", "load_trace",
}


def test_the_public_names_are_the_documented_ones():
    assert set(attnviz.__all__) == PUBLIC
    assert set(dir(attnviz)) >= PUBLIC
    documented = set(re.findall(r"^## `attnviz\.(\w+)", (ROOT / "docs" / "api.md").read_text(), re.M))
    assert documented == PUBLIC


def test_importing_attnviz_imports_nothing_else():
    code = "import sys, attnviz\nprint(sorted(m for m in sys.modules if m.startswith(('attnviz.', 'torch'))))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_each_name_is_the_object_of_its_home_module():
    from attnviz import checks, config, explain, kv_cache, pipeline, trace, trace_file, tracing

    assert attnviz.run is pipeline.run and attnviz.AttentionConfig is config.AttentionConfig
    assert attnviz.Trace is trace.Trace and attnviz.trace_module is tracing.trace_module
    assert attnviz.check_module is checks.check_module
    assert attnviz.show.__module__ == "attnviz"  # it traces a module, then notebook.show draws: views only draw
    assert attnviz.explain_weight is explain.explain_weight
    assert attnviz.kv_cache_bytes is kv_cache.kv_cache_bytes
    assert attnviz.load_trace is trace_file.load_trace
    assert attnviz.models.GPTModel.__module__ == "attnviz.models.gpt"


STABLE = re.compile(r"^Besides them, these module paths are stable.*?\n\n", re.M | re.S)


def test_every_module_path_api_md_names_is_declared_stable_and_loads_from_attnviz():
    text = (ROOT / "docs" / "api.md").read_text()
    paths = set(re.findall(r"`attnviz\.((?:[a-z_]+\.)*[a-z_]+)\.[A-Za-z_]\w*", text))  # "config", "views.notebook"
    used = {path for path in paths if not any(other.startswith(f"{path}.") for other in paths)}  # not "views"
    declared = STABLE.search(text)
    assert declared, "api.md says which module paths are stable"
    assert used, "api.md names module paths"
    assert all(f"`attnviz.{path}`" in declared.group() for path in used), used
    top = sorted({path.split(".")[0] for path in used} - {"views"})  # attnviz.views.notebook is imported by path
    code = f"import attnviz\nfor name in {top!r}:\n    getattr(attnviz, name)\nprint('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'pipeline_run'"):
        attnviz.pipeline_run  # noqa: B018


def test_run_gives_every_head_of_the_books_class():
    trace = attnviz.run("Your journey starts with one step", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    assert isinstance(trace, attnviz.Trace)
    weights = trace.steps["weights"]  # (1, heads, n, n)
    assert weights.shape == (1, 2, trace.n, trace.n)
    np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-6)
    assert np.all(np.triu(weights[0, 0], 1) == 0)  # causal: the future gets no weight


class TwoHeads(nn.Module):
    """A user's own causal attention, written as users write it."""

    def __init__(self, d_in=16, num_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.num_heads) ** 0.5
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, d)


def test_trace_module_and_check_module_on_a_users_module():
    torch.manual_seed(0)
    module = TwoHeads().eval()
    trace = attnviz.trace_module(module, torch.randn(3, 5, 16))
    assert trace.steps["weights"].shape == (3, 2, 5, 5)
    results = attnviz.check_module(module)
    assert results and all(result.status != "fail" for result in results)


def test_a_tensors_positions_are_labelled_as_positions_not_as_the_gpt2_tokens_of_their_numbers():
    """A (batch, n, d_in) tensor has no tokens: its rows are x[0], x[1], … on the Trace and on show()'s axes, never
    the GPT-2 tokens of ids 0, 1, … ('!', '"', …)."""
    trace = attnviz.trace_module(TwoHeads().eval(), torch.randn(1, 4, 16))
    assert trace.tokens == ("x[0]", "x[1]", "x[2]", "x[3]")
    from attnviz.views.notebook import figures_of  # what show() displays

    layout = figures_of(trace)["head"].layout
    labels = [str(label) for axis in ("xaxis", "xaxis2", "yaxis", "yaxis2") for label in (layout[axis].ticktext or ())
              if axis in layout]
    assert labels and all("x[" in label for label in labels), labels
    assert not any(piece in "".join(labels) for piece in ("!", "&quot;", "#"))


def test_run_names_a_config_that_is_not_an_attention_config():
    """A dict of settings is refused with a ConfigError that names its type, before the producers see it."""
    from attnviz.config import ConfigError

    with pytest.raises(ConfigError, match="config must be an attnviz.AttentionConfig, got dict"):
        attnviz.run("Hello", {"num_heads": 2})


@pytest.mark.parametrize(("checkpoint", "message"), [
    ("../../no-such-checkpoint", "No file or folder at ../../no-such-checkpoint"),  # wherever the checkout is
    ("/etc/passwd", "unknown checkpoint type"),
    ("EMPTY", "Nothing loadable in EMPTY"),  # a folder that holds nothing
])
def test_a_checkpoint_that_cannot_load_is_the_documented_config_error(checkpoint, message, monkeypatch, tmp_path):
    """api.md: run raises ConfigError for settings that cannot run; a bad checkpoint's error is both a ConfigError
    (so ``except ConfigError`` catches it) and a CheckpointError, with its own message."""
    from attnviz.config import ConfigError
    from attnviz.models import CheckpointError

    if checkpoint == "EMPTY":  # an empty folder of its own: /tmp may hold anyone's files, loadable or not
        empty = tmp_path / "empty"
        empty.mkdir()
        checkpoint, message = str(empty), re.escape(message.replace("EMPTY", str(empty)))
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match=message) as error:
        attnviz.run("Hi", attnviz.AttentionConfig(checkpoint=checkpoint))
    assert isinstance(error.value, CheckpointError)
