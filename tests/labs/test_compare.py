"""Compare page: the equivalences hold (and can fail), every variant runs on the same inputs, the page
draws a heatmap per variant with live badges (AppTest)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers.apptest import no_exception, open_app
from helpers.book import BOOK_V1_WEIGHTS_2, BOOK_V2_WEIGHTS
from helpers.maps import cells_shown, colour_range, images
from helpers.runs import ATOL, JOURNEY
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from attnviz import ablation, attention, embedding, pipeline, variants
from attnviz.config import AttentionConfig, preset_config
from attnviz.labs import compare
from attnviz.trace import Trace
from attnviz.urlstate import DEFAULTS
from attnviz.views.figures import PAIR_MAP_PX
from attnviz.words import amount

TIMEOUT = 120
GREEN = ":green-badge[:material/check_circle: equal · max |Δ| = "
SHAPES = [  # (d_in, d_out, heads, n)
    (3, 2, 2, 6),  # the book's toy example
    (16, 16, 4, 9),
    (32, 48, 6, 17),
    (64, 64, 1, 5),
]
SEEDS = (0, 123, 2024)


def book_mha(d_in, d_out, heads, n, seed, causal=True, qkv_bias=False):
    torch.manual_seed(seed)
    mha = attention.MultiHeadAttention(d_in, d_out, n, 0.0, heads, qkv_bias, causal=causal).eval()
    inputs = torch.randn(2, n, d_in)  # batch of 2: the copies must work for b > 1 too
    return mha, inputs


# ============================== (a) wrapper with copied weights = MHA before out_proj


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_wrapper_with_copied_heads_equals_mha_before_out_proj(shape, seed, causal):
    mha, inputs = book_mha(*shape, seed, causal=causal, qkv_bias=seed == 0)
    check = compare.check_wrapper_equals_mha(mha, inputs)
    assert check.max_diff <= compare.TOLERANCE
    assert check.ok


@pytest.mark.parametrize("seed", SEEDS)
def test_wrapper_equivalence_compares_the_tensor_before_out_proj(seed):
    mha, inputs = book_mha(16, 16, 4, 9, seed)
    context, output = compare.mha_context(mha, inputs)
    with torch.inference_mode():
        assert torch.allclose(mha.out_proj(context), output, atol=1e-6)
    trace = attention.Recorder()
    with torch.inference_mode():
        expected = mha(inputs, trace)
    assert torch.equal(expected, output)
    per_head = trace.steps["context"]  # (b, h, n, hd)
    assert torch.allclose(per_head.transpose(1, 2).reshape(2, 9, 16), context, atol=1e-6)


def test_two_sessions_reading_one_shared_mhas_context_each_get_their_own():
    """The equivalences' MHA is built once a config and shared by sessions: a forward of another session while this
    one's hook is on out_proj must not become this one's context."""
    import threading

    mha, inputs = book_mha(16, 16, 4, 9, 123)
    other_inputs = torch.randn_like(inputs)
    released, results = threading.Event(), {}

    def hold_the_other_session(module, args):  # the other session's forward waits before its projections
        if threading.current_thread().name == "other":
            released.wait(10)

    hold = mha.W_query.register_forward_pre_hook(hold_the_other_session)
    other = threading.Thread(target=lambda: results.update(other=compare.mha_context(mha, other_inputs)[0]),
                             name="other")
    other.start()
    try:
        for _ in range(200):  # until the other session's hook is on out_proj and its forward waits
            if mha.out_proj._forward_pre_hooks:
                break
            threading.Event().wait(0.01)
        mine, _ = compare.mha_context(mha, inputs)  # runs while the other session's hook is on
    finally:
        released.set()
        other.join(10)
        hold.remove()
    with torch.inference_mode():
        expected_mine, expected_other = compare.mha_context(mha, inputs)[0], compare.mha_context(mha, other_inputs)[0]
    assert torch.equal(mine, expected_mine)
    assert torch.equal(results["other"], expected_other)


@pytest.mark.parametrize("seed", SEEDS)
def test_swapped_heads_break_the_wrapper_equivalence(seed):
    mha, inputs = book_mha(16, 16, 4, 9, seed)
    wrapper = compare.copy_heads_from_mha(compare.wrapper_like(mha), mha)
    wrapper.heads[0], wrapper.heads[1] = wrapper.heads[1], wrapper.heads[0]
    context, _ = compare.mha_context(mha, inputs)
    with torch.inference_mode():
        assert compare.max_abs_diff(wrapper(inputs), context) > 1e-2


def test_the_raw_outputs_differ_and_the_check_says_by_how_much():
    mha, inputs = book_mha(16, 16, 4, 9, 123)
    torch.manual_seed(123)
    seeded = attention.MultiHeadAttentionWrapper(16, 4, 9, 0.0, 4).eval()
    with torch.inference_mode():
        seeded_output = seeded(inputs)
    check = compare.check_wrapper_equals_mha(mha, inputs, seeded_wrapper_output=seeded_output)
    assert check.ok
    assert check.detail["copied_vs_output"] > 1e-2  # out_proj alone makes them differ
    assert check.detail["seeded_vs_output"] > 1e-2  # and independent weights
    note = compare.raw_difference_note(check)
    assert "out_proj" in note and "random init" in note
    assert f"{check.detail['copied_vs_output']:.3g}" in note


def test_copying_a_head_copies_its_rows_and_biases():
    mha, _ = book_mha(8, 12, 3, 4, 1, qkv_bias=True)
    wrapper = compare.copy_heads_from_mha(compare.wrapper_like(mha), mha)
    assert torch.equal(wrapper.heads[2].W_key.weight, mha.W_key.weight[8:12])
    assert torch.equal(wrapper.heads[1].W_value.bias, mha.W_value.bias[4:8])
    assert torch.equal(wrapper.heads[0].W_query.weight, mha.W_query.weight[0:4])


# ============================== (b) MHA = scaled_dot_product_attention


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_mha_equals_sdpa_with_the_same_weights(shape, seed, causal):
    mha, inputs = book_mha(*shape, seed, causal=causal)
    check = compare.check_mha_equals_sdpa(mha, inputs)
    assert check.max_diff <= compare.TOLERANCE
    assert ("is_causal=True" in check.title) == causal


@pytest.mark.parametrize("seed", SEEDS)
def test_sdpa_with_the_wrong_causal_flag_differs(seed):
    mha, inputs = book_mha(16, 16, 4, 9, seed, causal=True)
    with torch.inference_mode():
        book_output = mha(inputs)
    assert compare.max_abs_diff(book_output, compare.sdpa_forward(mha, inputs, is_causal=False)) > 1e-2
    assert compare.max_abs_diff(book_output, compare.sdpa_forward(mha, inputs, is_causal=True)) <= 1e-5


# ============================== (c) −∞ before softmax = zero after softmax and renormalise


@pytest.mark.parametrize("seed", SEEDS)
def test_the_books_two_masking_routes_agree(seed):
    generator = torch.Generator().manual_seed(seed)
    scaled = 3 * torch.randn(2, 4, 11, 11, generator=generator)
    check = compare.check_masking_routes(scaled)
    assert check.max_diff <= compare.TOLERANCE
    weights = compare.mask_then_softmax(scaled)
    assert torch.all(weights[..., torch.triu_indices(11, 11, 1)[0], torch.triu_indices(11, 11, 1)[1]] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 11), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**16), spread=st.floats(0.1, 20.0))
def test_masking_routes_agree_for_any_scores(n, seed, spread):
    scaled = spread * torch.randn(n, n, generator=torch.Generator().manual_seed(seed))
    assert compare.max_abs_diff(compare.mask_then_softmax(scaled), compare.softmax_then_mask(scaled)) <= 1e-5


def test_zeroing_without_renormalising_is_not_the_same():
    scaled = torch.randn(1, 2, 7, 7, generator=torch.Generator().manual_seed(5))
    zeroed = torch.softmax(scaled, dim=-1) * torch.tril(torch.ones(7, 7))  # the book's step before ÷ row sums
    assert compare.max_abs_diff(compare.mask_then_softmax(scaled), zeroed) > 1e-2


# ============================== badges and helpers


def test_badge_says_equal_or_differ_with_the_number():
    equal = compare.Check("k", "t", 2.4e-7, {})
    different = compare.Check("k", "t", 0.31, {})
    broken = compare.Check("k", "t", float("nan"), {})
    assert equal.ok and equal.color == "green" and equal.icon == ":material/check_circle:"
    assert equal.badge == "equal · max |Δ| = 2.40e-07"
    assert not different.ok and different.color == "red" and different.icon == ":material/cancel:"
    assert different.badge == "differ · max |Δ| = 3.10e-01"
    assert not broken.ok
    assert compare.Check("k", "t", compare.TOLERANCE, {}).ok  # "≤ 1e-5" includes the bound


def test_max_abs_diff_refuses_different_shapes():
    with pytest.raises(ValueError, match="cannot compare shapes"):
        compare.max_abs_diff(torch.zeros(2, 3), torch.zeros(3, 2))
    assert compare.max_abs_diff(torch.tensor([1.0, -2.0]), torch.tensor([1.5, 1.0])) == pytest.approx(3.0)


# ============================== every variant on the same inputs


def small_trace(text="the cat sat on the mat", variant="mha", **overrides) -> Trace:
    multi_head = {name for name, v in variants.VARIANTS.items() if v.multi_head}
    config = AttentionConfig(variant=variant, d_in=16, d_out=16 if variant != "simplified" else 16,
                             num_heads=4 if variant in multi_head else 1, **overrides)
    return pipeline.run(text, config)


@pytest.mark.parametrize("causal", [True, False])
def test_every_variant_runs_on_the_trace_inputs(causal):
    trace = small_trace(causal=causal)
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    assert [v.variant for v in result.variants] == list(variants.LABELS)
    assert result.n == trace.n == result.total_tokens and not result.truncated
    assert all(v.output_shape == (1, trace.n, 16) for v in result.variants)
    assert {v.variant: v.heads for v in result.variants} == {
        "simplified": 1, "self_attention_v1": 1, "self_attention_v2": 1, "causal": 1, "mha_wrapper": 4, "mha": 4,
        "gqa": 4, "mqa": 4, "mla": 4, "swa": 4}
    upper = np.triu_indices(trace.n, k=1)
    for variant in result.variants:
        for how in compare.MAP_CHOICES:
            weights = variant.attention_map(how)
            assert weights.shape == (trace.n, trace.n)
            assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-5)
            assert (weights[upper] == 0).all() == (causal or variant.variant == variants.SWA)  # a window always masks
    assert all(check.ok for check in result.checks)


def test_the_attention_picked_of_a_users_module_is_not_asked_of_the_books_classes():
    """The module's second layer picked in the sidebar: the book's classes it is compared with compute one each."""
    base = compare.base_config(AttentionConfig(module="Your module: SmallGPT", d_in=16, d_out=16, num_heads=1,
                                               attention=2), 16, 4)
    assert base.module is None and base.attention == 1


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_same_seed_same_weights_as_the_app_shows_for_that_variant(variant):
    """Each variant here is the module the other pages run for it (same seed, same embeddings)."""
    trace = small_trace(variant=variant, seed=7)
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    shown = next(v for v in result.variants if v.variant == variant)
    assert np.array_equal(shown.weights, trace.steps["weights"][0])
    other_seed = compare.compare_trace(trace, replace(compare.base_config(trace.config, 16, 4), seed=8))
    if variant != "simplified":  # no weights: the seed changes nothing there
        changed = next(v for v in other_seed.variants if v.variant == variant)
        assert not np.allclose(changed.weights, shown.weights)


def test_a_new_text_compares_with_the_modules_the_last_text_built():
    """The variants' modules are built once a config; a text compared with them gives what fresh modules give."""
    first, second = small_trace("the cat sat on the mat"), small_trace("a different text, with more tokens in it")
    base = compare.base_config(first.config, 16, 4)
    compare.variant_modules.cache_clear()
    compare.compare_trace(first, base)
    built = compare.variant_modules(base, compare.MAX_TOKENS)
    reused = compare.compare_trace(second, base)
    assert compare.variant_modules(base, compare.MAX_TOKENS) is built
    compare.variant_modules.cache_clear()
    fresh = compare.compare_trace(second, base)
    assert compare.variant_modules(base, compare.MAX_TOKENS) is not built
    for shown, expected in zip(reused.variants, fresh.variants, strict=True):
        assert np.array_equal(shown.weights, expected.weights), shown.variant
    assert [c.max_diff for c in reused.checks] == [c.max_diff for c in fresh.checks]


EQUIVALENCE_BUILDERS = ("wrapper_like", "gqa_from_mha", "causal_mha_from", "swa_from_mha")


def test_a_new_text_of_as_many_tokens_builds_no_module_for_the_equivalences(monkeypatch):
    """The copies of MHA the equivalences run (wrapper, SDPA, GQA, causal MHA, SWA with W = n) are built once a config
    and length: a second text of as many tokens only runs them, and measures what freshly built copies measure."""
    first, second = small_trace("the cat sat on the mat"), small_trace("the dog sat on the rug")
    assert first.n == second.n
    base = compare.base_config(first.config, 16, 4)

    def clear():
        for name in ("variant_modules", "check_modules", "swa_module"):
            if hasattr(compare, name):
                getattr(compare, name).cache_clear()

    clear()
    compare.compare_trace(first, base)
    built = []
    for name in (*EQUIVALENCE_BUILDERS, "sdpa_forward"):
        if hasattr(compare, name):
            real = getattr(compare, name)
            monkeypatch.setattr(compare, name, lambda *args, _real=real, _name=name, **kwargs:
                                built.append(_name) or _real(*args, **kwargs))
    reused = compare.compare_trace(second, base)
    assert built == []
    clear()
    fresh = compare.compare_trace(second, base)
    assert set(built) == set(EQUIVALENCE_BUILDERS)  # a new config builds each of them
    assert [c.max_diff for c in reused.checks] == [c.max_diff for c in fresh.checks]
    assert [c.title for c in reused.checks] == [c.title for c in fresh.checks]


def test_a_single_head_run_still_compares_the_multi_head_variants_with_the_sidebar_heads():
    trace = small_trace(variant="causal")
    assert trace.config.num_heads == 1
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 8))
    assert {v.variant: v.heads for v in result.variants}["mha"] == 8
    assert "8 heads" in result.checks[0].title


def test_mqas_one_kv_head_is_not_taken_for_a_gqa_setting():
    """An MQA run's config says its one K/V head (num_kv_groups=1); the GQA it is compared with still groups its
    heads as GQA left open does (2 K/V heads for 4), not as one shared head."""
    trace = small_trace(variant="mqa")
    assert trace.config.num_kv_groups == 1
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    ran = {v.variant: v.config for v in result.variants}
    assert (ran["gqa"].num_kv_groups, ran["gqa"].kv_groups, ran["mqa"].kv_groups) == (None, 2, 1)


def test_long_texts_are_compared_on_the_first_256_tokens():
    trace = small_trace(" ".join(["token"] * 300))
    assert trace.n > 256
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    assert result.n == compare.MAX_TOKENS == 256
    assert result.truncated and result.total_tokens == trace.n
    mha = next(v for v in result.variants if v.variant == variants.MHA)
    assert mha.weights.shape == (4, 256, 256)
    assert np.array_equal(mha.weights, trace.steps["weights"][0][:, :256, :256])  # causal: a prefix
    assert all(check.ok for check in result.checks)


def test_variant_titles_say_which_map_is_drawn():
    trace = small_trace()
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    by_name = {v.variant: v for v in result.variants}
    assert "head 0" in compare.variant_title(by_name["mha"], "head 0")
    assert "mean of 4 heads" in compare.variant_title(by_name["mha"], "mean over heads")
    assert "single head" in compare.variant_title(by_name["causal"], "mean over heads")
    assert compare.variant_title(by_name["mha"], "head 0", current="mha").startswith("▶ ")
    assert not compare.variant_title(by_name["causal"], "head 0", current="mha").startswith("▶ ")


NOT_CAUSAL_IN_THE_BOOK = ["simplified", "self_attention_v1", "self_attention_v2"]  # the listings of 3.3 and 3.4


@pytest.mark.parametrize("causal", [True, False])
def test_a_variant_caption_says_when_the_sidebars_mask_is_applied_to_a_listing_without_one(causal):
    """The book's 3.3/3.4 classes have no mask of their own: the caption says when they are drawn with the
    sidebar's Causal mask (on by default), and says nothing when it is off.  Each modern variant's caption gives the
    sizes its module ran with: K/V heads (GQA, MQA), latent dim (MLA), window W (SWA) — the defaults, or the ones
    the sidebar set, which an MHA run holds none of; the sidebar's W on an MHA run, and that a W of at least the
    tokens draws no band."""
    trace = small_trace(causal=causal)
    base = compare.base_config(trace.config, 16, 4, window=trace.n if causal else None)  # MHA's run holds no W
    if not causal:  # the sidebar's sizes, set by hand: GQA's 1 K/V head, a latent of 5, a window of 3
        base = compare.base_config(trace.config, 16, 4, window=3, kv_heads=1, latent=5)
    result = compare.compare_trace(trace, base)
    modules = compare.variant_modules(base, compare.MAX_TOKENS)  # what each variant ran
    said_sizes = {
        "gqa": f"· {modules['gqa'].num_kv_groups} K/V head", "mqa": "· 1 K/V head shared by all 4 query heads",
        "mla": f"· K/V latent dim {modules['mla'].latent_dim}",
        "swa": "· window W = 6 (no band: W ≥ the 6 tokens, so every earlier key is seen)" if causal
        else "· window W = 3",
    }
    assert trace.n == 6 and trace.config.window is None
    assert (modules["gqa"].num_kv_groups, modules["mla"].latent_dim) == ((2, 16) if causal else (1, 5))
    for variant in result.variants:
        caption = compare.variant_caption(variant, causal=causal)
        assert caption.startswith(f"output {variant.output_shape} · {amount(variant.heads, 'head')}")
        assert ("K/V" in caption or "window" in caption) == (variant.variant in said_sizes), caption
        if variant.variant in said_sizes:
            assert said_sizes[variant.variant] in caption, caption
        assert ("no band" in caption) == (causal and variant.variant == variants.SWA), caption
        said = "the sidebar's Causal mask" in caption
        assert said == (causal and variant.variant in NOT_CAUSAL_IN_THE_BOOK), caption
        if said:
            assert f"the book's {variants.get(variant.variant).section} listing has none" in caption


def test_a_card_says_the_sidebars_kv_groups_or_latent_it_cannot_take_and_runs_the_default():
    """K/V groups that do not divide the heads, a latent wider than d_out (a stale view's run keeps its sizes while
    the sidebar's change): the GQA and MLA cards run the class's defaults and say why, where a module built with
    them would refuse."""
    trace = small_trace()
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4, kv_heads=3, latent=20))
    captions = {v.variant: compare.variant_caption(v, causal=True) for v in result.variants}
    assert captions["gqa"].endswith("· 2 K/V heads, each shared by 2 query heads (the sidebar's K/V groups, 3, do "
                                    "not divide its 4 heads: it runs the default 2)"), captions["gqa"]
    assert captions["mla"].endswith("· K/V latent dim 16 (the sidebar's latent width, 20, is wider than its d_out "
                                    "16: it runs the default 16)"), captions["mla"]
    assert "sidebar's K/V groups" not in captions["mqa"] and all(check.ok for check in result.checks)


def test_variant_heatmap_draws_the_chosen_map_with_masked_cells_as_gaps():
    trace = small_trace()
    result = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4))
    mha = result.variants[-1]
    fig = compare.variant_heatmap(mha, result.tokens, "mean over heads", causal=True, current="mha")
    z = cells_shown(fig)
    upper = np.triu_indices(result.n, k=1)
    assert np.isnan(z[upper]).all()
    assert np.allclose(np.nan_to_num(z), mha.weights.mean(axis=0), atol=1e-6)
    with pytest.raises(ValueError):  # a narrow map has no colour bar: the page says its one scale (SCALE_NOTE)
        colour_range(fig)
    beside_module = compare.variant_heatmap(mha, result.tokens, "head 0", width=PAIR_MAP_PX, show_scale=True)
    assert colour_range(beside_module) == (0.0, 1.0)
    assert fig.layout.title.text == compare.variant_title(mha, "mean over heads", "mha")
    assert fig.layout.margin.t > 110  # the two-line title has its own room above the key ticks
    head0 = compare.variant_heatmap(mha, result.tokens, "head 0", causal=True)
    assert np.allclose(np.nan_to_num(cells_shown(head0)), mha.weights[0], atol=1e-6)
    windowed = compare.compare_trace(trace, compare.base_config(trace.config, 16, 4, window=4))
    swa = next(v for v in windowed.variants if v.variant == variants.SWA)
    band = np.tril(np.ones((6, 6), dtype=bool)) & ~np.tril(np.ones((6, 6), dtype=bool), -4)  # keys i−3 … i
    for how in compare.MAP_CHOICES:  # the keys W = 4 or more back are grey (masked), not drawn as weight 0
        z = cells_shown(compare.variant_heatmap(swa, windowed.tokens, how, causal=True))
        assert (np.isfinite(z) == band).all(), (how, z)
        assert np.isnan(z[-1, :2]).all()


# ============================== the page (AppTest)


CHECKS = 6  # wrapper = MHA, MHA = SDPA, the masking routes, GQA = MHA, SWA = causal MHA, the rotary shift


def compare_page(**query) -> AppTest:
    at = open_app(timeout=TIMEOUT, **query).switch_page("pages/compare.py").run()
    no_exception(at)
    return at


def map_figures(at: AppTest) -> list[dict]:
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return [fig for fig in figures if images(fig)]


def badges(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if re.search(r":\w+-badge\[", m.value)]


def titles(at: AppTest) -> list[str]:
    return [fig["layout"]["title"]["text"] for fig in map_figures(at)]


@pytest.fixture(scope="module")
def default_page() -> AppTest:
    return compare_page()


def test_compare_page_draws_a_heatmap_per_variant_and_green_badges(default_page):
    at = default_page
    assert at.title[0].value == "Compare variants"
    assert len(map_figures(at)) == len(variants.VARIANTS)
    assert sorted(t.split("<br>")[0].removeprefix("▶ ") for t in titles(at)) == sorted(  # a name a variant
        label.partition(" (")[0] for label in variants.LABELS.values())
    assert all(label.partition(" (")[2].removesuffix(")") in "".join(titles(at))  # its note in the second line
               for label in variants.LABELS.values())
    assert sum(t.startswith("▶ ") for t in titles(at)) == 1  # the sidebar's variant is marked
    found = badges(at)
    assert len(found) == CHECKS
    assert all("max |Δ|" in badge and badge.startswith(GREEN) for badge in found)
    captions = [c.value for c in at.caption]
    assert sum(c.startswith("output (1, 6, 768)") for c in captions) == len(variants.VARIANTS)
    assert sum("the sidebar's Causal mask" in c for c in captions) == len(NOT_CAUSAL_IN_THE_BOOK)  # 3.3 and 3.4
    # the sidebar holds SWA's W (its default) while MHA is picked: SWA's card runs it
    swa = [c for c in captions if c.startswith("output") and "window" in c]
    assert len(swa) == 1 and swa[0].endswith(f" · window W = {DEFAULTS['sliding_window_size']}"), swa
    # the sidebar shows the sizes the GQA, MLA and SWA cards run, which MHA does not take, and says so
    assert at.sidebar.selectbox(key="num_kv_groups").value == DEFAULTS["num_kv_groups"]
    assert int(at.sidebar.text_input(key="latent_dim_box").value) == DEFAULTS["latent_dim"]
    assert int(at.sidebar.text_input(key="sliding_window_size_box").value) == DEFAULTS["sliding_window_size"]
    assert any("This page runs its grouped-query variant with K/V groups, its latent variant with Latent width and "
               "its sliding-window variant with Window W; the picked class does not take any of them." in c.value
               for c in at.sidebar.caption)
    swa_map = next(fig for fig in map_figures(at) if fig["layout"]["title"]["text"].startswith("Sliding-window"))
    assert np.isnan(cells_shown(swa_map)[-1, :2]).all()  # W = 4: the last query's keys 0–1 are grey, hidden


def test_compare_page_has_the_scaling_ablation(default_page):
    at = default_page
    assert "Why ÷√dₖ?" in [h.value for h in at.subheader]
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    ablation_fig = next(fig for fig in figures if "saturation" in fig["layout"]["title"]["text"])
    stars = [t for t in ablation_fig["data"] if t.get("marker", {}).get("symbol") == "star"]
    assert len(stars) == 6 and all(t["x"] == [64] for t in stars)  # GPT-2 small: head_dim 64


def test_a_new_text_of_as_many_tokens_draws_the_random_scaling_curves_without_computing_them_again(monkeypatch):
    """The "Why ÷√dₖ?" curves are random q and k: another text of as many tokens (every long one: the page compares
    its first 256) with the same seed and mask reuses them; a new seed draws new ones."""
    calls = []
    real = ablation.scaling_ablation
    monkeypatch.setattr(ablation, "scaling_ablation", lambda **kwargs: calls.append(kwargs) or real(**kwargs))
    at = compare_page(seed="4242", text="One two three four five six")
    at.sidebar.text_area(key="text").set_value("Six other words are here now").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(calls) == 1 and calls[0]["num_tokens"] == 6
    assert "Why ÷√dₖ?" in [h.value for h in at.subheader]
    at.sidebar.text_input(key="seed_box").input(str(4243)).run()
    assert len(calls) == 2


@pytest.mark.parametrize(("heads", "said"), [(4, "4 heads"), (1, "1 head"), (64, "64 heads")])
def test_changing_the_head_count_keeps_the_badges_green(heads, said):
    at = compare_page()
    at.sidebar.selectbox(key="num_heads").set_value(heads).run()
    assert not at.exception, [e.value for e in at.exception]
    found = badges(at)
    assert len(found) == CHECKS and all(b.startswith(GREEN) and "max |Δ|" in b for b in found)
    assert f"{said} of {768 // heads}" in at.caption[0].value
    assert any(f"Wrapper ({said}, weights copied)" in m.value for m in at.markdown)
    assert len(map_figures(at)) == len(variants.VARIANTS)


def test_mean_over_heads_is_said_in_the_titles():
    at = compare_page()
    at.segmented_control(key="compare_map").set_value("mean over heads").run()
    assert not at.exception
    multi = sum(v.multi_head for v in variants.VARIANTS.values())  # the wrapper, MHA and the bonus variants
    assert sum("mean of 12 heads" in t for t in titles(at)) == multi
    assert sum("single head" in t for t in titles(at)) == len(variants.VARIANTS) - multi


def test_a_non_causal_single_head_class_in_the_sidebar_leaves_the_maps_unmasked_and_the_heads_the_sidebars():
    at = compare_page(variant="self_attention_v2", causal="false")
    assert len(map_figures(at)) == len(variants.VARIANTS)
    found = badges(at)
    assert len(found) == CHECKS and all(b.startswith(GREEN) for b in found), found  # every card drawn, each equal
    assert any("is_causal=False" in m.value for m in at.markdown)
    assert "12 heads of 64" in at.caption[0].value  # the sidebar's heads, though v2 itself has one
    window = variants.get(variants.SWA).label.partition(" (")[0]  # a sliding window masks whatever the mask says
    for fig in map_figures(at):
        z = cells_shown(fig)
        assert z.shape == (6, 6)
        assert np.isfinite(z).all() or window in fig["layout"]["title"]["text"]  # nothing masked


def test_long_text_page_says_it_compares_the_first_256_tokens():
    at = compare_page(text=" ".join(["word"] * 300), preset="book")
    assert any("first 256" in info.value for info in at.info)
    assert "256 tokens" in at.caption[0].value
    assert len(map_figures(at)) == len(variants.VARIANTS)
    found = badges(at)
    assert len(found) == CHECKS and all(b.startswith(GREEN) for b in found), found  # every card drawn, each equal


# ============================== the book's toy example: each class as its listing builds it

BOOK_PICKS = ["simplified", "self_attention_v1", "self_attention_v2", "causal", "mha_wrapper", "mha", "gqa"]


def book_size_comparison(picked: str, **overrides) -> compare.Comparison:
    """The Compare page at the sidebar's "Book toy example" size with ``picked`` in the sidebar (its sizes: 3 → 2, 2
    heads; the wrapper's listing, 3 → 2 per head: d_out 4)."""
    trace = pipeline.run(JOURNEY, preset_config("book", variant=picked, **overrides))
    _, d_out, num_heads = variants.PRESETS["book"].sizes(variants.get(picked))
    return compare.compare_trace(trace, compare.base_config(trace.config, d_out, num_heads))


@pytest.mark.parametrize("picked", BOOK_PICKS)
def test_at_the_book_size_v1_and_v2_show_the_books_printed_weights_whichever_class_is_picked(picked):
    """SelfAttention_v1 is the book's at seed 123 and unmasked, SelfAttention_v2 at seed 789: with either (or any
    other class) picked, their maps on this page are the book's printed weights."""
    by_name = {result.variant: result for result in book_size_comparison(picked).variants}
    assert np.allclose(by_name["self_attention_v1"].weights[0, 1], BOOK_V1_WEIGHTS_2, atol=ATOL)
    assert np.allclose(by_name["self_attention_v2"].weights[0], BOOK_V2_WEIGHTS, atol=ATOL)


@pytest.mark.parametrize("picked", BOOK_PICKS)
def test_at_the_book_size_every_variant_is_the_one_the_other_pages_show_when_it_is_picked(picked):
    """Each variant's map here is the map the Heads page draws for it at the book size (its listing's seed and mask,
    ``preset_config``), and its config says which seed and mask it ran."""
    result = book_size_comparison(picked)
    for shown in result.variants:
        spec = variants.get(shown.variant)
        assert (shown.config.seed, shown.config.causal) == (spec.book_seed, spec.book_causal), shown.variant
        own = pipeline.run(JOURNEY, preset_config("book", variant=shown.variant))
        assert np.allclose(shown.weights, own.steps["weights"][0], atol=1e-6), shown.variant
    assert all(check.ok for check in result.checks)


@pytest.mark.parametrize(("picked", "overrides"), [("self_attention_v2", {"seed": 5}),
                                                    ("self_attention_v1", {"causal": True}),
                                                    ("mha", {"causal": False})])
def test_at_the_book_size_a_seed_or_mask_of_ones_own_runs_every_variant_with_it(picked, overrides):
    """Not the book's listing (a seed or mask the learner set): every variant runs the sidebar's seed and mask, as at
    any other size."""
    config = preset_config("book", variant=picked, **overrides)
    result = book_size_comparison(picked, **overrides)
    assert {(shown.config.seed, shown.config.causal) for shown in result.variants} == {(config.seed, config.causal)}


def test_at_the_book_size_the_wrappers_init_note_compares_the_wrapper_and_mha_as_drawn():
    """"Independent random init": the wrapper and MHA the page draws (each at its listing's seed, 123, also with
    SelfAttention_v2 and its 789 picked), built here as the book builds them, differ by the number the note gives —
    at equal widths (a seed of one's own at the book size: every variant runs the sidebar's 2 heads of 1)."""
    check = next(c for c in book_size_comparison("mha", seed=123, causal=False).checks if c.key == "wrapper_mha")
    inputs = torch.tensor(embedding.JOURNEY_INPUTS).unsqueeze(0)  # (6, 3) -> (1, 6, 3)
    torch.manual_seed(123)
    wrapper = attention.MultiHeadAttentionWrapper(3, 1, 6, 0.0, 2, causal=False).eval()  # 2 heads of 1: d_out 2
    torch.manual_seed(123)
    mha = attention.MultiHeadAttention(3, 2, 6, 0.0, 2, causal=False).eval()
    with torch.inference_mode():
        expected = compare.max_abs_diff(wrapper(inputs), mha(inputs))  # (1, 6, 2) each
    assert check.detail["seeded_vs_output"] == pytest.approx(expected, abs=1e-7)
    assert "seed 123" in compare.raw_difference_note(check)


@pytest.mark.parametrize("picked", BOOK_PICKS)
def test_at_the_book_size_the_wrapper_runs_its_listing_and_mha_its_own_whichever_class_is_picked(picked):
    """The wrapper's listing (3.6.1) has 2 heads of 2 (d_out per head), MHA's (3.6.2) 2 heads of 1: each runs its own
    here, the checks hold (the copied wrapper has MHA's widths), and the notes say the widths differ rather than
    measure a difference between outputs of different widths."""
    result = book_size_comparison(picked)
    by_name = {shown.variant: shown for shown in result.variants}
    assert by_name[variants.WRAPPER].output_shape == (1, 6, 4)
    assert by_name[variants.MHA].output_shape == (1, 6, 2)
    assert all(check.ok for check in result.checks)
    check = next(c for c in result.checks if c.key == "wrapper_mha")
    assert "seeded_vs_output" not in check.detail and check.detail["widths"] == (4, 2)
    note = compare.raw_difference_note(check)
    assert "4 wide" in note and "d_out = 2 in all" in note
    assert compare.heads_caption(result) == ("2 heads of 1 for the multi-head ones (Multi-head wrapper: 2 of 2, its "
                                             "listing's d_out per head)")


def test_the_book_size_page_says_each_variants_seed_and_draws_the_books_maps():
    at = compare_page(preset="book", variant="self_attention_v2")
    maps = {fig["layout"]["title"]["text"].split("<br>")[0].removeprefix("▶ "): cells_shown(fig)
            for fig in map_figures(at)}
    assert np.allclose(maps["Self-attention v1"][1], BOOK_V1_WEIGHTS_2, atol=ATOL)
    assert np.allclose(maps["Self-attention v2"], BOOK_V2_WEIGHTS, atol=ATOL)
    captions = [c.value for c in at.caption if c.value.startswith("output (1, 6, ")]
    assert len(captions) == len(variants.VARIANTS)
    seeds = [re.findall(r"seed (\d+)", c) for c in captions]  # the simplified class has no weights: no seed
    assert sorted(map(tuple, seeds)) == sorted([(), ("789",), *[("123",)] * (len(captions) - 2)])
    assert "Self-attention v2: seed 789, the others: seed 123" in at.caption[0].value  # the page's caption
    found = badges(at)
    assert len(found) == CHECKS and all(b.startswith(GREEN) for b in found), found  # every card drawn, each equal
