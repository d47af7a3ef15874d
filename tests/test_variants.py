"""attnviz.variants: one record per variant; everything else reads the registry (so a new one is one record)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz import attention, pipeline, urlstate, variants
from attnviz.config import AttentionConfig
from attnviz.labs import compare
from attnviz.views import diagram, source, steps

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Your journey starts with one step"


def test_every_record_builds_its_class_and_records_its_shape_path():
    for name, spec in variants.VARIANTS.items():
        config = AttentionConfig(variant=name, d_in=8, d_out=8, num_heads=2 if spec.multi_head else 1,
                                          context_length=16)
        torch.manual_seed(0)
        assert type(spec.build(config)) is spec.cls
        trace = pipeline.run(TEXT, config)
        recorded = [diagram._split_name(stage)[0] for stage, _ in trace.shapes]
        assert recorded == list(spec.shape_path), name
        assert trace.num_heads == spec.head_count(2)


def test_the_book_names_and_sections():
    assert [spec.cls.__name__ for spec in variants.VARIANTS.values()] == [
        "SimplifiedSelfAttention", "SelfAttention_v1", "SelfAttention_v2", "CausalAttention",
        "MultiHeadAttentionWrapper", "MultiHeadAttention",  # chapter 3
        "GroupedQueryAttention", "GroupedQueryAttention", "MultiHeadLatentAttention", "MultiHeadAttentionWithSWA"]
    assert [spec.section for spec in variants.VARIANTS.values()] == [
        "3.3", "3.4.2", "3.4.2", "3.5.3", "3.6.1", "3.6.2",
        "bonus ch04/04_gqa", "bonus ch04/04_gqa", "bonus ch04/05_mla", "bonus ch04/06_swa"]
    assert variants.get(variants.MHA).out_proj and variants.get(variants.WRAPPER).heads == variants.PER_HEAD
    with pytest.raises(KeyError, match="Unknown variant 'nope'"):
        variants.get("nope")


def test_settings_that_do_not_apply_say_why():
    reasons = {name: {s: spec.not_applicable(s) for s in ("d_out", "num_heads", "dropout", "train", "d_in")}
               for name, spec in variants.VARIANTS.items()}
    assert reasons["simplified"]["d_out"] == "The simplified variant has no weights: its output width is d_in."
    assert reasons["causal"]["num_heads"] == "Single-head variant: it has one head."
    assert reasons["self_attention_v2"]["dropout"] == "This variant has no dropout in the book."
    assert all(reason is None for reason in reasons["mha"].values())
    assert all(reasons[name]["d_in"] is None for name in reasons)


def test_presets_live_once():
    assert variants.PRESETS["gpt2-small"].dims == (768, 768, 12)
    assert all(p.d_out % p.num_heads == 0 and p.d_out // p.num_heads == 64
               for name, p in variants.PRESETS.items() if name.startswith("gpt2"))
    assert {name: p.dims for name, p in variants.PRESETS.items()} == urlstate.PRESET_DIMS
    assert list(urlstate.PRESETS) == [*variants.PRESETS, variants.CUSTOM]


def test_a_new_variant_is_one_record():
    """Register a record (here: the book's MHA with qkv_bias, sizes fixed as a checkpoint would fix them): the
    pipeline, the URL parser, the diagram, the source panel, the Steps text and the Compare page all take it."""
    spec = variants.Variant(
        "mha_bias_test", "MHA with biases (test)", "", attention.MultiHeadAttention,
        lambda c: attention.MultiHeadAttention(c.d_in, c.d_out, c.context_length, c.dropout, c.num_heads, True,
                                               causal=c.causal),
        weights="linear", heads=variants.BATCHED, dropout=True, out_proj=True, book_causal=True,
        fixed_settings={"d_in": "The checkpoint decides d_in."},
    )
    variants.register(spec)
    try:
        config = AttentionConfig(variant="mha_bias_test", d_in=8, d_out=8, num_heads=2, context_length=16)
        trace = pipeline.run(TEXT, config.validate())
        assert trace.num_heads == 2 and spec.not_applicable("d_in") == "The checkpoint decides d_in."
        values, notices = urlstate.settings_from_query({"variant": "mha_bias_test"})
        assert values["variant"] == "mha_bias_test" and notices == []
        assert "out_proj" in diagram.shape_dot(trace.shapes, config)
        assert "attnviz-flow" in diagram.shape_flow_html(trace.shapes, config)
        assert "class MultiHeadAttention" in source.variant_source("mha_bias_test")
        assert steps.step_text(config, "masked")["code"].startswith("attn_scores.masked_fill_")
        result = compare.compare_trace(trace, compare.base_config(config, 8, 2))
        assert "mha_bias_test" in [v.variant for v in result.variants]
        assert np.isfinite(result.checks[0].max_diff)
    finally:
        del variants.VARIANTS["mha_bias_test"], variants.LABELS["mha_bias_test"]


def test_variant_names_are_spelled_in_the_registry_only():
    """Outside tests, a variant's name appears as a string literal only in attnviz/variants.py (the README
    documents them; benchmark results record them), and as a word of users' class names in window_reading."""
    spelled = {}
    for file in sorted(ROOT.rglob("*.py")):  # the project's own files, in a checkout or an export alike
        path = file.relative_to(ROOT).as_posix()
        if path.startswith("tests/") or any(part.startswith(".") for part in file.relative_to(ROOT).parts):
            continue  # the tests, and what no commit holds: .venv, .git, caches (.gitignore)
        text = file.read_text(encoding="utf-8")
        for name in variants.VARIANTS:
            if name == "causal":  # also the setting's name: the variant's own literal is checked below
                continue
            if f'"{name}"' in text or f"'{name}'" in text:
                spelled.setdefault(name, set()).add(path)
    # window_reading matches the words users put in their own class names ("MyGQA", "SWAWithCache"): abbreviations
    # that happen to be variant ids, not attnviz's variants
    class_name_words = {"mha", "gqa", "mqa", "swa"}
    assert spelled == {name: {"attnviz/variants.py"} | ({"attnviz/window_reading.py"} if name in class_name_words
                                                         else set())
                       for name in variants.VARIANTS if name != "causal"}


@pytest.mark.parametrize("variant", ["simplified", "self_attention_v1", "self_attention_v2"])
def test_the_added_mask_note_is_one_function_in_both_wordings_and_is_told_from_other_notes(variant):
    """A 3.3/3.4 class run masked: its run's note is ``added_mask_note`` in Python's words; the app's words come from
    the same function; ``is_added_mask_note`` tells both from every other note of a run."""
    config = AttentionConfig(variant=variant, d_in=3, d_out=5, num_heads=4, dropout=0.5, device="cuda",
                             embedding="book", seed=5)
    trace = pipeline.run(TEXT, config)
    python = variants.added_mask_note(trace.config, python=True)
    app = variants.added_mask_note(trace.config)
    assert [note for note in trace.notes if variants.is_added_mask_note(note)] == [python]
    assert len(trace.notes) > 1  # the settings it ignored, the device it fell back from
    assert "causal=False" in python and "Causal mask is on" in app and python != app
    assert variants.is_added_mask_note(app)
    unmasked = pipeline.run(TEXT, AttentionConfig(variant=variant, d_in=3, d_out=5, num_heads=4, causal=False))
    assert variants.added_mask_note(unmasked.config) is None
    assert variants.added_mask_note(unmasked.config, python=True) is None
    assert not any(variants.is_added_mask_note(note) for note in unmasked.notes)
