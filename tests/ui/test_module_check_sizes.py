"""The Heads page's Check panel gives ``check_module`` the sizes the module was built with, as ``attnviz check``
does: a module that keeps its sizes under names of its own gets the same verdict in the app and in a terminal."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from helpers.apptest import no_exception
from streamlit.testing.v1 import AppTest

from attnviz import cli, user_code

ROOT = Path(__file__).resolve().parents[2]

# nanochat's grouped-query attention keeps its K/V heads as n_kv_head, a name attnviz does not know; this one caches K
# and V after repeating them to every query head, the waste grouped-query attention exists to save
NANOCHAT_STYLE = textwrap.dedent('''
    import math

    import torch
    from torch import nn


    class RepeatedKVCache(nn.Module):
        def __init__(self, d_in, num_heads, num_kv_groups):
            super().__init__()
            self.n_head, self.n_kv_head, self.head_dim = num_heads, num_kv_groups, d_in // num_heads
            self.c_q = nn.Linear(d_in, d_in, bias=False)
            self.c_k = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
            self.c_v = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False)
            self.c_proj = nn.Linear(d_in, d_in, bias=False)
            self.k_cache = self.v_cache = None

        def reset_cache(self):
            self.k_cache = self.v_cache = None

        def forward(self, x, use_cache=False):
            b, n, d = x.shape
            q = self.c_q(x).view(b, n, self.n_head, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
            k = self.c_k(x).view(b, n, self.n_kv_head, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
            v = self.c_v(x).view(b, n, self.n_kv_head, self.head_dim).transpose(1, 2)  # (b, g, n, hd)
            repeat = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)  # (b, h, n, hd)
            if use_cache:
                if self.k_cache is not None:
                    k = torch.cat([self.k_cache, k], 2)  # (b, h, cached + n, hd)
                    v = torch.cat([self.v_cache, v], 2)  # (b, h, cached + n, hd)
                self.k_cache, self.v_cache = k, v
            nk = k.shape[2]
            attn_scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  # (b, h, n, nk)
            keep = torch.ones(n, nk, dtype=torch.bool).tril(diagonal=nk - n)  # (n, nk)
            attn_weights = torch.softmax(attn_scores.masked_fill(~keep, float("-inf")), -1)  # (b, h, n, nk)
            return self.c_proj((attn_weights @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d)
''')


def test_the_check_panel_and_the_cli_give_a_module_the_same_sizes_and_verdict(tmp_path, monkeypatch, capsys):
    """The kv-cache rule reads num_kv_groups from the sizes the module was built with (it keeps them as
    ``n_kv_head``): the panel passed none, so it passed a cache the terminal fails."""
    path = tmp_path / "nanochat_style.py"
    path.write_text(NANOCHAT_STYLE)
    monkeypatch.setenv(user_code.ENV, f"{path}:RepeatedKVCache")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    query = {"variant": "Your module: RepeatedKVCache", "d_in": "32", "d_out": "32", "num_heads": "4"}
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    no_exception(at)
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    app_results = dict(zip(table["rule"], table["result"]))
    app_kv_cache = table["evidence"][list(table["rule"]).index("kv-cache")]
    caption = next(c.value for c in at.caption if "attnviz check" in c.value)
    argv = re.search(r"`python -m attnviz check ([^`]+)`", caption).group(1).split()
    argv[0] = f"{tmp_path}/{argv[0]}"
    assert cli.main(["check", *argv]) == 1
    printed = capsys.readouterr().out
    cli_results = {rule: result.lower() for rule, result in re.findall(r"^(\S+)\s+(PASS|FAIL|skip)\b", printed, re.M)}
    assert cli_results == app_results
    assert app_results["kv-cache"] == "fail"
    assert "k_cache and v_cache hold num_heads = 4 heads where num_kv_groups = 2" in app_kv_cache
