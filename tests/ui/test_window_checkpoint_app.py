"""AppTest: a sliding-window checkpoint in the app — its page says the window its layer runs with, and a bare state
dict of the book's GPTModel says once, under Weights, that it runs full causal attention.  The checkpoints are
attnviz's GPTModel with random weights, written here (no downloads)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers.apptest import decode, grid, no_exception, plotly_figures
from helpers.window_cache import scheduled_window_bytes
from streamlit.testing.v1 import AppTest

from attnviz import kv_cache, kv_cache_bytes, models, tokens
from attnviz.models.gpt import RANDOM_GPT_CONFIG, random_gpt

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
WINDOW = 3
STRIDES = (1, 2)
TEXT = "one two three four five six"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("window-checkpoints")
    model = random_gpt("sliding-window", seed=7, sliding_window_size=WINDOW)
    cfg = {**{key: RANDOM_GPT_CONFIG[key] for key in ("vocab_size", "context_length", "emb_dim", "n_heads",
                                                      "n_layers", "drop_rate", "qkv_bias")},
           "sliding_window_size": WINDOW, "sliding_window_stride": 1}
    torch.save({"model_state_dict": model.state_dict(), "cfg": cfg}, folder / "swa.pth")
    torch.save(model.state_dict(), folder / "bare.pth")
    odd = random_gpt("grouped-query", n_heads=2).state_dict()  # heads 64 wide; a W_key of no whole number of heads
    odd.update({key: value[:100] for key, value in odd.items() if ".att.W_key." in key})
    torch.save(odd, folder / "odd.pth")  # refused: neither multi-head, grouped-query nor latent attention
    for stride in STRIDES:  # 4 layers: window + full layers mixed by the book's schedule
        mixed = random_gpt("sliding-window", seed=5, sliding_window_size=WINDOW, n_layers=4)
        torch.save({"model_state_dict": mixed.state_dict(), "cfg": {**cfg, "n_layers": 4,
                                                                    "sliding_window_stride": stride}},
                   folder / f"stride{stride}.pth")
    return folder


pytestmark = pytest.mark.usefixtures("checkpoint_environment")  # the app lists ``checkpoints`` (tests/conftest.py)


def shown(at: AppTest) -> list[str]:
    """Every caption, info and warning of the app (the sidebar's included)."""
    return [element.value for kind in (at.caption, at.info, at.warning) for element in kind]


def test_a_bare_state_dict_says_once_under_weights_that_it_runs_full_causal_attention():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="weights").set_value("bare.pth").run()
    no_exception(at)
    said = [text for text in shown(at) if "full causal attention" in text]
    assert len(said) == 1 and "not stored in a state dict" in said[0], shown(at)
    assert [caption.value for caption in at.sidebar.caption].count(said[0]) == 1


def test_a_sliding_window_checkpoints_page_names_its_layers_window():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="weights").set_value("swa.pth").run()
    no_exception(at)
    assert any(f"sliding window of {WINDOW} tokens" in text for text in shown(at)), shown(at)
    assert not any("not stored in a state dict" in text for text in shown(at))


def held_bytes(path: Path, ids: list[int], steps: int) -> list[int]:
    """The bytes of every layer's cache_k and cache_v (the book's names) after the prefill and each of ``steps``
    greedy steps of the model saved at ``path``, run here without attnviz's generation."""
    model = models.load_checkpoint(path)
    ids, held = list(ids), []
    model.reset_kv_cache()
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=True)  # (1, n, vocab): the prefill
        for step in range(steps + 1):
            held.append(sum(t.numel() * t.element_size() for block in model.trf_blocks
                            for t in (block.att.cache_k, block.att.cache_v)))
            if step < steps:
                logits = model(logits[:, -1:].argmax(-1), use_cache=True)  # (1, 1) the greedy token, fed alone
    return held


@pytest.mark.parametrize("stride", STRIDES)
def test_the_generate_page_counts_each_layers_own_cache_of_a_mixed_schedule(stride, checkpoints):
    """The book's sliding_window_stride K mixes window and full layers: the page's bytes (the table, the metric, the
    caption's call pasted into Python) are the cache tensors' bytes after each step, and the schedule's formula
    (tests/helpers/window_cache.py) gives them; the chart's line of this model's own attention draws it too."""
    prompt = tokens.encode(TEXT)
    actual = held_bytes(checkpoints / f"stride{stride}.pth", prompt, 2)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights=f"stride{stride}.pth", text=TEXT)
    at.switch_page("pages/generate.py").run()
    no_exception(at)
    for k in (0, 1, 2):
        if k:
            at.button(key="generate_next").click().run()
            no_exception(at)
        n = len(prompt) + k
        formula = scheduled_window_bytes(n, WINDOW, emb_dim=128, n_heads=8, n_layers=4, stride=stride)
        shown = grid(at, "layer", "bytes").value["bytes"].sum()
        assert shown == actual[k] == formula, k
        assert at.metric[1].value == kv_cache.format_bytes(actual[k])
        caption = next(c.value for c in at.caption if "kv_cache_bytes(" in c.value)
        call, said = re.search(r"`(kv_cache_bytes\([^`]*\))` = ([\d,]+) bytes", caption).groups()
        assert eval(call, {"kv_cache_bytes": kv_cache_bytes}) == int(said.replace(",", "")) == actual[k], call
    held = "\n".join(m.value for m in at.markdown)
    windowed = [layer for layer in range(4) if stride == 1 and layer % 2 == 0 or stride == 2 and layer != 2]
    assert f"**Layers {', '.join(map(str, windowed))}** (a sliding window of {WINDOW} tokens) cache" in held, held
    assert "(full attention) cache" in held and "Each of the 4 layers" not in held, held
    chart = next(f for f in plotly_figures(at) if "KV cache of this model" in f["layout"]["title"]["text"])
    line = next(trace for trace in chart["data"] if trace["name"].startswith("SWA ("))
    lengths, values = decode(line["x"]), decode(line["y"])
    for length, value in zip(lengths, values):
        formula = scheduled_window_bytes(int(length), WINDOW, emb_dim=128, n_heads=8, n_layers=4, stride=stride)
        assert value == formula, length


@pytest.mark.parametrize(("layer", "mask"), [(0, f"sliding-window mask (W = {WINDOW})"), (1, "causal mask")])
@pytest.mark.parametrize("causal", ["true", "false"])
def test_the_heads_page_says_the_shown_layers_own_mask_and_that_causal_off_is_ignored(layer, mask, causal):
    """Stride 1: layer 0 slides, layer 1 is full; the book's sliding-window class masks whatever the Causal switch
    says, so with it off the page says the switch is ignored, never "no mask" or "causal mask OFF"."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights="stride1.pth", layer=str(layer), causal=causal)
    at.run()
    no_exception(at)
    caption = next(c.value for c in at.caption if "device" in c.value and " · " in c.value)
    assert f" · {mask} · " in caption, caption
    assert "no mask" not in caption and "causal mask OFF" not in caption, caption
    ignored = [text for text in shown(at) if "Ignored causal mask = off" in text]
    assert len(ignored) == (causal == "false"), shown(at)
    if causal == "false":
        assert "causal mask off ignored" in caption, caption


@pytest.mark.parametrize(("layer", "causal"), [(0, "true"), (0, "false"), (1, "false")])
def test_the_shape_diagrams_and_the_steps_code_say_the_shown_layers_own_mask(layer, causal):
    """Stride 1: layer 0 slides, layer 1 is full, and both mask whatever the Causal switch says: the flow beside the
    step and the Shapes page's diagram name the layer's band or causal mask (never "mask off", nor a dashed, greyed
    masked stage), and the masked step's code is not "skipped"."""
    import html

    masked = (f"sliding window W = {WINDOW}: −∞ where j > i or i − j ≥ {WINDOW} (a band)" if layer == 0
              else "causal mask: −∞ above diagonal")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights="stride1.pth", layer=str(layer), causal=causal, stage="masked")
    at.switch_page("pages/steps.py").run()
    no_exception(at)
    flow = at.get("html")[0].proto.body  # the compact shape diagram beside the step
    assert html.escape(masked) in flow and "mask off" not in flow, flow
    masked_box = re.search(r'<div[^>]*data-stage="masked"[^>]*>', flow).group(0)
    assert "dashed" not in masked_box, masked_box
    code = [block.value for block in at.code]
    assert any("masked_fill" in block for block in code) and not any("skipped" in block for block in code), code
    at.switch_page("pages/shapes.py").run()
    no_exception(at)
    dot = at.get("graphviz_chart")[1].proto.spec  # the layer's attention (the whole model is the first)
    assert masked.split(":")[0] in dot and "mask off" not in dot, dot


def test_the_knock_out_of_a_window_layer_with_causal_off_runs_nothing_again(monkeypatch):
    """The book's sliding-window class masks whatever the Causal switch says: the run is the model as trained, so
    the knock-out's intact row is the run's own (no second intact forward pass) and no caption says otherwise."""
    from attnviz.ui import interventions

    intact_runs = []
    ablate_next = models.ablate_next

    def counted(model, token_ids, heads, position):
        if not heads:
            intact_runs.append(position)
        return ablate_next(model, token_ids, heads, position)

    monkeypatch.setattr(models, "ablate_next", counted)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights="stride1.pth", layer="0", causal="false", text=TEXT)
    at.run()
    at.session_state["heads_what"] = True  # the learner opens "What this attention does"
    at.run()
    no_exception(at)
    assert any("intact" in list(d.value.index) for d in at.dataframe)
    assert intact_runs == [] and interventions.AS_TRAINED not in shown(at), shown(at)
    at.session_state["heads_what_tab"] = "Rollout, logit lens"
    at.run()
    no_exception(at)
    assert interventions.AS_TRAINED not in shown(at), shown(at)


@pytest.mark.parametrize("name", ["odd.pth"])
def test_a_refused_checkpoints_message_names_it_and_holds_no_server_path(name, checkpoints):
    """discovery: the app shows only a listed name; the path stays on the server."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="weights").set_value(name).run()
    no_exception(at)
    said = [re.sub(r"\\(.)", r"\1", element.value)  # markdown's escapes undone: the words a reader sees
            for kind in (at.error, at.warning, at.info, at.caption, at.markdown) for element in kind]
    refused = [text for text in said if "not a whole number of heads" in text]
    assert refused and all(name in text for text in refused), said
    assert not any(str(checkpoints) in text or str(checkpoints.resolve()) in text for text in said), refused


REPEATED = "the cat sat on the mat and the dog ran the cat sat on the mat and the dog ran"


def head_types_shown(at: AppTest) -> tuple:
    """The Heads page's head types as a reader gets them: the section's sentences, its table, every layer's."""
    said = tuple(m.value for m in at.markdown if "with a type:**" in m.value or m.value.startswith("**Every layer**"))
    table = next(d.value for d in at.dataframe if "type" in d.value.columns)
    notices = tuple(i.value for i in at.info if "No head is named a type here" in i.value)
    return said, table.to_dict("list"), notices


@pytest.mark.parametrize("layer", ["0", "1"])
def test_head_types_read_the_mask_that_ran_not_the_causal_switch(layer):
    """The book's sliding-window class masks whatever the Causal switch says (layer 0 a window, layer 1 a full
    layer): with the switch off the run is the one with it on, so the head types, the layer's and every layer's, are
    the same — no notice that the heads see the future, no column of their weight on later tokens."""
    from attnviz.ui import head_labels

    shown = {}
    for causal in ("true", "false"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        at.query_params.update(weights="stride1.pth", layer=layer, causal=causal, text=REPEATED)
        at.run()
        at.toggle(key="heads_overview").set_value(True).run()
        no_exception(at)
        shown[causal] = head_types_shown(at)
    said, table, notices = shown["false"]
    assert notices == () and head_labels.FUTURE_COLUMN not in table, shown["false"]
    assert not any("see the future" in text for text in said), said
    assert shown["false"] == shown["true"]


def test_the_induction_lab_names_the_window_layers_that_score_0_and_not_a_causal_switch_they_ignore():
    """The lab runs a model with its causal mask; the sliding-window class has it whatever the switch says, so the
    lab does not say that the switch (off) applies to the other pages.  stride1.pth has 4 layers, 0 and 2 with a
    window of 3, 1 and 3 full: at T = 3 the stripe (2 back) is inside the window; at T = 4 it is 3 back, outside, so
    the heads of layers 0 and 2 score 0 by construction, and the lab says so and why, naming those two layers only."""
    from attnviz.ui import induction

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update(weights="stride1.pth", causal="false", T="3")
    at.switch_page("pages/induction.py").run()
    no_exception(at)
    assert induction.CHECKPOINT_CAUSAL not in [c.value for c in at.caption]
    assert not any("see the future" in i.value for i in at.info)
    assert not any("sliding window" in i.value for i in at.info), [i.value for i in at.info]
    at.text_input(key="induction_T").input("4").run()
    no_exception(at)
    said = [i.value for i in at.info if "sliding window" in i.value]
    assert len(said) == 1 and said[0].startswith("Layers 0 and 2 of this checkpoint run a sliding window (W = 3)"), \
        [i.value for i in at.info]
    assert "score 0 by construction" in said[0] and "Set T to 3 or less" in said[0], said
    assert said == [induction.layers_window_caption({0: WINDOW, 2: WINDOW}, 4)]
