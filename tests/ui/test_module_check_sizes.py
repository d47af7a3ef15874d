"""The Heads page's Check panel gives ``check_module`` the sizes the module was built with, as ``attnviz check``
does: a module that keeps its sizes under names of its own gets the same verdict in the app and in a terminal."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers.apptest import check_panel_command, check_panel_results, no_exception
from helpers.check_table import printed_results
from streamlit.testing.v1 import AppTest

from attnviz import cli, user_code

ROOT = Path(__file__).resolve().parents[2]

# nanochat's grouped-query attention keeps its K/V heads as n_kv_head, a name attnviz does not know; this one caches K
# and V after repeating them to every query head, the waste grouped-query attention exists to save
NANOCHAT_STYLE = textwrap.dedent('''
    from helpers.user_modules import NanochatGQA


    class RepeatedKVCache(NanochatGQA):
        def __init__(self, d_in, num_heads, num_kv_groups):
            super().__init__(d_in, num_heads, num_kv_groups, caches_repeated=True)
''')


def test_the_check_panel_and_the_cli_give_a_module_the_same_sizes_and_verdict(tmp_path, monkeypatch, capsys):
    """The kv-cache rule reads num_kv_groups from the sizes the module was built with (it keeps them as
    ``n_kv_head``): the panel passes them as the terminal does, so both fail the cache that holds every query head,
    with the same results for every rule."""
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
    app_results = check_panel_results(at)
    app_kv_cache = table["evidence"][list(table["rule"]).index("kv-cache")]
    assert cli.main(["check", *check_panel_command(at, tmp_path)]) == 1
    assert printed_results(capsys.readouterr().out) == app_results
    assert app_results["kv-cache"] == "fail"
    assert "k_cache and v_cache hold num_heads = 4 heads where num_kv_groups = 2" in app_kv_cache


def test_the_check_panel_runs_a_module_on_the_width_it_was_built_with(monkeypatch):
    """EinsumProjections(d_model=64) projects with einsum; its only nn.Linear, the output's, takes 128: the app feeds
    it the 64-wide input it was built for, shows no error of its forward, and its Check panel fails no rule."""
    monkeypatch.setenv(user_code.ENV, f"{ROOT / 'tests' / 'helpers' / 'user_modules.py'}:EinsumProjections")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in {"variant": "Your module: EinsumProjections", "d_in": "64", "num_heads": "8"}.items():
        at.query_params[key] = value
    at.run()
    no_exception(at)
    said = [element.value for element in (*at.error, *at.warning)]
    assert not [words for words in said if "raised" in words], said
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    assert len(table) == 9 and "fail" not in set(table["result"]), table
