"""AppTest of the Benchmark page: it says what it times (the heads it times, the torch threads it times with, and
that the attention variant is not it), and it ignores an empty text, timing its own tokens, while keeping the text
for the pages that read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.apptest import APP, TIMEOUT, no_exception
from streamlit.testing.v1 import AppTest

from attnviz import user_code

MODULE = f"{Path(__file__).resolve().parents[1] / 'helpers' / 'user_modules.py'}:CausalSelfAttention"


@pytest.mark.parametrize(("query", "heads", "variant_note"), [
    ({"variant": "Your module: CausalSelfAttention", "preset": "custom", "d_in": "16", "d_out": "16",
      "num_heads": "1", "causal": "false", "device": "cpu"}, "1 head, causal)", False),
    ({"variant": "gqa"}, "12 heads,", True),
])
def test_the_benchmark_says_what_it_times_and_that_the_variant_is_not_it(query, heads, variant_note, monkeypatch):
    """With a user's module the caption says the module is not timed and which sidebar settings do not apply (its
    mask and device toggles are the module's, disabled): a link's causal=false and device=cpu do not change what is
    timed, and the caption names them.  Dropout does not apply whatever the variant: the five are timed in eval mode."""
    monkeypatch.setenv(user_code.ENV, MODULE)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("pages/benchmark.py").run()
    no_exception(at)
    intro = next(m.value for m in at.markdown if m.value.startswith("Five implementations"))
    assert heads in intro and "1 heads" not in intro
    threads = torch.get_num_threads()  # what a timing in Python has to match (AppTest runs the script here)
    assert f"Device: **cpu, {threads} torch thread{'s' if threads != 1 else ''}**." in intro
    assert any("*Attention variant* does not apply here" in c.value for c in at.caption) == variant_note
    module_note = [c.value for c in at.caption if c.value.startswith("Your module is not timed here")]
    assert module_note == ([] if variant_note else [
        "Your module is not timed here: these are five ways to write the book's multi-head attention, with the "
        "sidebar's sizes and seed. The sidebar's mask and device are your module's, so they do not apply: the five "
        "are timed with the causal mask, on the device above. Ignored URL parameter causal='false': the five are timed "
        "with the causal mask. Ignored URL parameter device='cpu': the five are timed on the device above."])
    assert "Dropout does not apply: the five are timed in eval mode, without dropout." in [c.value for c in at.caption]
    if not variant_note:
        assert at.sidebar.toggle(key="causal").disabled and at.sidebar.selectbox(key="device").disabled


def test_the_benchmark_ignores_an_empty_text_and_keeps_it():
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["text"] = ""
    at.switch_page("pages/benchmark.py").run()
    no_exception(at)
    assert not any("Type some text" in w.value for w in at.warning)  # its own "Tokens n": the text is not used
    assert at.title[0].value == "Implementations benchmark"
    # a box that holds no number in its range stays as typed, and Run times nothing until it does, saying why under it
    at.text_input(key="benchmark_n").input("5000")
    at.text_input(key="benchmark_repeats").input("1.5").run()
    no_exception(at)
    assert (at.text_input(key="benchmark_n").value, at.text_input(key="benchmark_repeats").value) == ("5000", "1.5")
    assert [w.value.replace("\\", "") for w in at.warning] == [
        "Tokens n 5,000 is outside 1 … 1,024: Run benchmark times nothing until the box holds a number in that range.",
        "Timed repeats '1.5' is not a whole number (1 … 100): Run benchmark times nothing until the box holds a number "
        "in that range."]
    assert at.button(key="benchmark_run").disabled and not at.dataframe
    at.text_input(key="benchmark_n").input("8")
    at.text_input(key="benchmark_repeats").input("1").run()
    assert not at.warning and not at.button(key="benchmark_run").disabled
    at.button(key="benchmark_run").click().run()
    no_exception(at)
    assert len(at.dataframe[0].value) >= 4  # every implementation timed
    # its numbers drawn as the bars write them: two decimals ("1.00" beside "1.91", not "1")
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["median ms"]["type_config"]["format"] == columns["× fastest"]["type_config"]["format"] == "%.2f"
    assert at.sidebar.text_area(key="text").value == ""
    at.switch_page("pages/heads.py").run()  # kept for the pages that read it, which say it is empty
    no_exception(at)
    assert any("Type some text" in w.value for w in at.warning) and at.sidebar.text_area(key="text").value == ""
