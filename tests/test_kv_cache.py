"""attnviz.kv_cache_bytes against the book's memory estimators (ch04/04_gqa, 05_mla, 06_swa), whose formulas are
written again here, layer by layer, from their description — and against numbers worked out by hand for real
models.  Note the estimators' ``n_kv_groups`` is a GROUP SIZE: kv heads = n_heads // n_kv_groups."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnviz
from attnviz import kv_cache
from attnviz.config import AttentionConfig
from attnviz.views import generation_figures

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def book_estimate(*, context_length, emb_dim, n_heads, n_layers, n_kv_groups=1, latent_dim=None,
                  sliding_window_size=None, swa_ratio="1:0", batch_size=1, dtype="fp16") -> int:
    """The estimators' totals, one layer at a time: the layer pattern is a blocks of SWA then b full, repeated,
    a last partial block starting with its SWA layers."""
    size = BYTES[dtype]
    head_dim = math.ceil(emb_dim / n_heads)
    kv_heads = n_heads // n_kv_groups
    pattern = ["full"] * n_layers
    if sliding_window_size is not None:
        a, b = (int(part) for part in swa_ratio.split(":"))
        block = ["swa"] * a + ["full"] * b
        pattern = [block[i % len(block)] for i in range(n_layers)]
    total = 0
    for kind in pattern:
        tokens = min(context_length, sliding_window_size) if kind == "swa" else context_length
        if latent_dim is not None:
            total += batch_size * tokens * latent_dim * size
        else:
            total += batch_size * tokens * head_dim * kv_heads * 2 * size
    return total


CASES = [  # (book estimator arguments, attnviz arguments): kv heads = heads // group size
    (dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12),  # GPT-2 small, MHA
     dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)),
    (dict(context_length=32768, emb_dim=4096, n_heads=32, n_layers=32, n_kv_groups=4, dtype="bf16"),  # GQA
     dict(context_length=32768, emb_dim=4096, n_heads=32, n_layers=32, n_kv_heads=8, dtype="bf16")),
    (dict(context_length=8192, emb_dim=2048, n_heads=16, n_layers=24, n_kv_groups=16, batch_size=4, dtype="fp32"),
     dict(context_length=8192, emb_dim=2048, n_heads=16, n_layers=24, n_kv_heads=1, batch_size=4, dtype="fp32")),
    (dict(context_length=131072, emb_dim=7168, n_heads=128, n_layers=61, latent_dim=576, dtype="bf16"),  # MLA
     dict(context_length=131072, emb_dim=7168, n_heads=128, n_layers=61, latent_dim=576, dtype="bf16")),
    (dict(context_length=32768, emb_dim=4096, n_heads=32, n_layers=32, n_kv_groups=4, sliding_window_size=1024,
          swa_ratio="5:1", dtype="bf16"),  # SWA + GQA, 5:1 (32 layers: 5 blocks and 2 SWA)
     dict(context_length=32768, emb_dim=4096, n_heads=32, n_layers=32, n_kv_heads=8, sliding_window_size=1024,
          swa_ratio="5:1", dtype="bf16")),
    (dict(context_length=4096, emb_dim=768, n_heads=12, n_layers=7, sliding_window_size=512, swa_ratio="2:3"),
     dict(context_length=4096, emb_dim=768, n_heads=12, n_layers=7, sliding_window_size=512, swa_ratio="2:3",
          dtype="fp16")),  # 7 layers of 2:3: SWA SWA full full full SWA SWA
    (dict(context_length=300, emb_dim=768, n_heads=12, n_layers=12, sliding_window_size=512),  # W > context
     dict(context_length=300, emb_dim=768, n_heads=12, n_layers=12, sliding_window_size=512, dtype="fp16")),
    (dict(context_length=65536, emb_dim=1000, n_heads=12, n_layers=10, sliding_window_size=4096, swa_ratio="1:5",
          dtype="int8"),  # head_dim = ⌈1000/12⌉ = 84; 10 layers of 1:5 = 2 SWA + 8 full
     dict(context_length=65536, emb_dim=1000, n_heads=12, n_layers=10, sliding_window_size=4096, swa_ratio="1:5",
          dtype="int8")),
    (dict(context_length=16384, emb_dim=2048, n_heads=16, n_layers=12, latent_dim=256, sliding_window_size=2048,
          swa_ratio="3:1", dtype="bf16"),  # MLA with a window
     dict(context_length=16384, emb_dim=2048, n_heads=16, n_layers=12, latent_dim=256, sliding_window_size=2048,
          swa_ratio="3:1", dtype="bf16")),
]


@pytest.mark.parametrize(("book", "ours"), CASES)
def test_kv_cache_bytes_equals_the_books_estimators(book, ours):
    assert attnviz.kv_cache_bytes(**ours) == book_estimate(**book)


@pytest.mark.parametrize("book", [case[0] for case in CASES if "n_kv_groups" in case[0] or "latent_dim" not in
                                  case[0]])
def test_the_estimators_n_kv_groups_is_taken_as_they_take_it_a_group_size(book):
    """A call copied from the book's estimator scripts (``n_kv_groups``: query heads per K/V head) gives their
    number, not Python's TypeError."""
    assert attnviz.kv_cache_bytes(**{"n_kv_groups": 1, **book}) == book_estimate(**book)


@pytest.mark.parametrize(("extra", "words"), [
    ({"n_kv_groups": 5}, r"n_kv_groups \(5\) must divide n_heads \(12\) exactly: as the book's memory estimator "
                         r"scripts take it, n_kv_groups is a group size — query heads per K/V head, n_kv_heads = "
                         r"n_heads // n_kv_groups — where attnviz's n_kv_heads counts the K/V heads\."),
    ({"n_kv_groups": 4, "n_kv_heads": 3}, r"n_kv_groups 4 and n_kv_heads 3 do not go together: n_kv_heads counts "
                                          r"the K/V heads, while n_kv_groups, .* is a group size"),
    ({"n_kv_groups": 4, "latent_dim": 64}, "latent_dim and n_kv_groups do not go together"),
    ({"n_kv_groups": 0}, "n_kv_groups must be a whole number ≥ 1, got 0"),
])
def test_an_n_kv_groups_that_cannot_be_a_group_size_is_refused_in_words(extra, words):
    with pytest.raises(ValueError, match=words):
        attnviz.kv_cache_bytes(context_length=1024, emb_dim=768, n_heads=12, n_layers=12, **extra)


def test_hand_worked_numbers():
    # GPT-2 small, fp32, 1024 tokens: 12 layers × 1024 × 64 × 12 heads × 2 × 4 bytes
    assert kv_cache.preset("GPT-2 124M").bytes() == 12 * 1024 * 64 * 12 * 2 * 4 == 75_497_472
    # Llama 3.2 1B at 128k, bf16: 16 layers × 131072 × 64 × 8 kv heads × 2 × 2 = 4 GiB
    assert kv_cache.preset("Llama 3.2 1B").bytes() == 4 * 2**30
    # Gemma 3 270M: 18 layers at 5:1 -> 15 sliding (512 tokens) + 3 full (32768), 1 kv head × 256 × 2 × 2 bytes
    assert kv_cache.preset("Gemma 3 270M").bytes() == (15 * 512 + 3 * 32768) * 1024
    # Qwen3 0.6B: head_dim 128 set apart from 1024 / 16 = 64
    assert kv_cache.preset("Qwen3 0.6B").bytes() == 28 * 40960 * 128 * 8 * 2 * 2
    assert kv_cache.preset("DeepSeek-V3 671B").bytes() == 61 * 163840 * 576 * 2
    # DeepSeek-V3 as MHA (the line its MLA is compared with): 128 heads of 128 (v_head_dim), not 7168 / 128 = 56
    deepseek = kv_cache.preset("DeepSeek-V3 671B")
    as_mha = kv_cache.variant_settings(**{k: v for k, v in deepseek.kwargs().items() if k != "swa_ratio"})["MHA"]
    assert attnviz.kv_cache_bytes(context_length=163840, dtype="bf16", **as_mha) == 61 * 163840 * 128 * 128 * 2 * 2
    assert kv_cache.layer_split(18, "5:1") == (15, 3) and kv_cache.layer_split(7, "2:3") == (4, 3)


def test_presets_name_their_source_and_cover_the_models_asked_for():
    names = {m.name for m in kv_cache.PRESETS}
    assert {"GPT-2 124M", "GPT-2 1.5B", "Llama 3.2 1B", "Qwen3 0.6B", "Gemma 3 270M"} <= names
    assert all("/" in m.source for m in kv_cache.PRESETS)
    assert {m.attention for m in kv_cache.PRESETS} >= {"MHA", "GQA", "MLA", "MQA + SWA 5:1"}


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(n_kv_heads=5), "must divide n_heads"),
    (dict(n_kv_heads=0), "n_kv_heads must be a whole number"),
    (dict(context_length=-1), "context_length must be"),
    (dict(sliding_window_size=0), "sliding_window_size must be"),
    (dict(sliding_window_size=16, swa_ratio="0:0"), "a \\+ b > 0"),
    (dict(sliding_window_size=16, swa_ratio="five"), "must look like"),
    (dict(dtype="fp4"), "dtype must be one of"),
    (dict(latent_dim=2.5), "latent_dim must be"),
    # contradictions: each setting would change nothing, so the number would not be the one asked for
    (dict(latent_dim=512, n_kv_heads=4), "latent_dim and n_kv_heads"),
    (dict(latent_dim=512, n_kv_heads=12), "latent_dim and n_kv_heads"),
    (dict(swa_ratio="5:1"), "swa_ratio '5:1' needs a sliding_window_size"),
    (dict(swa_ratio="1:0"), "swa_ratio '1:0' needs a sliding_window_size"),
])
def test_bad_values_are_refused_with_a_message(kwargs, message):
    base = dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)
    with pytest.raises(ValueError, match=message):
        kv_cache.kv_cache_bytes(**{**base, **kwargs})


def test_a_ratio_without_window_layers_needs_no_window():
    base = dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)
    assert kv_cache.kv_cache_bytes(**base, swa_ratio="0:1") == kv_cache.kv_cache_bytes(**base)


def test_an_mla_latent_as_wide_as_k_and_v_together_is_said_to_save_nothing():
    """2 heads of 64 with a given latent 256: as wide as MHA's 2 × 2 × 64, so the MLA line is MHA's; the note says
    which latent the line draws and why it saves nothing, and says only which latent where MLA saves."""
    two_heads = kv_cache.variant_settings(emb_dim=128, n_heads=2, n_layers=2, latent_dim=256)
    curves = kv_cache.curves(two_heads, [256, 1024])
    assert curves["MLA"] == curves["MHA"]
    assert kv_cache.latent_note(two_heads, "the sizes' latent") == (
        "The MLA line caches a latent of 256 numbers per token and layer: the sizes' latent. It saves nothing here: "
        "its latent is as wide as the K and V it replaces (2 × 2 heads × 64 = 256 numbers per token and layer: MHA's "
        "cache).")
    wide = kv_cache.variant_settings(emb_dim=128, n_heads=2, n_layers=2, latent_dim=320)
    assert "It costs more than MHA here: its latent is wider" in kv_cache.latent_note(wide, "given")
    narrow = kv_cache.variant_settings(emb_dim=128, n_heads=2, n_layers=2, latent_dim=64)
    assert kv_cache.latent_note(narrow, "given") == ("The MLA line caches a latent of 64 numbers per token and "
                                                     "layer: given.")


@pytest.mark.parametrize(("emb_dim", "heads", "head_dim"), [
    (768, 12, None), (128, 2, None), (64, 4, None), (2048, 32, None),
    (640, 4, 256),  # Gemma 3 270M: its attention's d_out, 4 × 256 = 1,024, is wider than its emb_dim
])
def test_the_mla_line_fills_in_the_books_default_latent_a_run_uses(emb_dim, heads, head_dim):
    """Sizes without a latent draw MLA with the book's default max(16, d_out // 8), d_out the attention's width
    (heads × head_dim, as the book's MultiHeadLatentAttention has it) — the latent an MLA run of attnviz at that d_out
    has (AttentionConfig.latent_width) — and the note names d_out as the book does and says what it is."""
    sizes = kv_cache.variant_settings(emb_dim=emb_dim, n_heads=heads, n_layers=1, head_dim=head_dim)
    d_out = heads * (head_dim or emb_dim // heads)
    run = AttentionConfig(variant="mla", d_in=emb_dim, d_out=d_out, num_heads=heads).latent_width
    assert sizes["MLA"]["latent_dim"] == run == max(16, d_out // 8)
    assert kv_cache.latent_note(sizes) == (
        f"The MLA line caches a latent of {run:,} numbers per token and layer: the book's default "
        f"max(16, d_out // 8) at d_out = {heads} heads × {d_out // heads} = {d_out:,}, the latent attnviz's MLA has at "
        "that width (bonus ch04/05_mla's MultiHeadLatentAttention).")


def test_variant_curves_and_their_figure():
    settings = kv_cache.variant_settings(emb_dim=2048, n_heads=32, n_layers=16)
    assert list(settings) == list(kv_cache.VARIANTS)
    assert settings["GQA"]["n_kv_heads"] == 4 and settings["MQA"]["n_kv_heads"] == 1
    lengths = kv_cache.context_lengths(131072)
    assert lengths[0] == 256 and lengths[-1] == 131072
    curves = kv_cache.curves(settings, lengths)
    at = lengths.index(32768)
    mha = book_estimate(context_length=32768, emb_dim=2048, n_heads=32, n_layers=16, dtype="bf16")
    assert curves["MHA"][at] == mha and curves["GQA"][at] == mha // 8 and curves["MQA"][at] == mha // 32
    assert curves["MLA"][at] == 16 * 32768 * 256 * 2  # latent max(16, 2048 // 8)
    swa = book_estimate(context_length=32768, emb_dim=2048, n_heads=32, n_layers=16, sliding_window_size=1024,
                        swa_ratio="5:1", dtype="bf16")
    assert curves["SWA"][at] == swa
    fig = generation_figures.kv_bytes_figure(lengths, curves, title="t", marker_at=4096)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [trace.name for trace in fig.data] == list(kv_cache.VARIANTS)
    assert list(fig.data[0].y) == curves["MHA"] and list(fig.data[0].x) == lengths


def test_no_tick_label_crowds_the_last_context_length():
    """DeepSeek-V3's 163,840 tokens follow 131,072 on a log axis: its tick (160k) stands alone, not on 128k's."""
    lengths = kv_cache.context_lengths(163840)
    fig = generation_figures.kv_bytes_figure(lengths, {"MHA": lengths}, title="t", marker_at=163840)
    assert list(fig.layout.xaxis.tickvals)[-2:] == [65536, 163840]
    assert list(fig.layout.xaxis.ticktext)[-2:] == ["64k", "160k"]
    assert list(fig.data[0].x) == lengths  # every length still drawn
    gpt2 = generation_figures.kv_bytes_figure(kv_cache.context_lengths(131072), {"MHA": [1] * 10}, title="t")
    assert list(gpt2.layout.xaxis.ticktext)[-2:] == ["64k", "128k"]


def test_a_curve_that_equals_an_earlier_one_is_drawn_dotted_and_says_so():
    lengths = [256, 512]
    curves = {"MHA": [10, 20], "GQA": [5, 10], "MLA": [10, 20]}  # MLA caches what MHA caches: one line under the other
    fig = generation_figures.kv_bytes_figure(lengths, curves, {"MLA": "MLA (latent 256)"}, title="t")
    mla = fig.data[2]
    assert mla.name == "MLA (latent 256) = MHA" and mla.line.dash == "dot"
    assert fig.data[0].line.dash == fig.data[1].line.dash == "solid" and fig.data[1].name == "GQA"


@pytest.mark.parametrize(("attention", "settings", "own"), [
    ("grouped-query", {"num_kv_groups": 4}, {"n_kv_heads": 4}),
    ("multi-query", {}, {"n_kv_heads": 1}),
    ("latent", {"latent_dim": 96}, {"latent_dim": 96}),
    ("sliding-window", {"sliding_window_size": 4}, {"sliding_window_size": 4}),
    ("multi-head", {}, {}),
])
def test_a_models_sizes_name_its_own_k_v_heads_latent_or_window(attention, settings, own):
    """The Generate page's cost chart draws a model's own K/V heads, latent and window, not stand-ins."""
    from attnviz import weights
    from attnviz.models import gpt

    sizes = weights.sizes(gpt.random_gpt(attention, **settings))
    found = {key: getattr(sizes, key) for key in ("n_kv_heads", "latent_dim", "sliding_window_size")}
    assert found == {"n_kv_heads": None, "latent_dim": None, "sliding_window_size": None, **own}
    curves = kv_cache.variant_settings(emb_dim=sizes.emb_dim, n_heads=sizes.num_heads, n_layers=sizes.n_layers,
                                       **{key: value for key, value in found.items() if value is not None})
    if attention == "grouped-query":
        assert curves["GQA"]["n_kv_heads"] == 4
    if attention == "latent":
        assert curves["MLA"]["latent_dim"] == 96
    if attention == "sliding-window":
        assert curves["SWA"]["sliding_window_size"] == 4


def test_chosen_gqa_kv_heads_are_used_where_they_group_the_heads():
    """The sidebar's K/V groups are the GQA lines' K/V heads where they group the heads; 12 of 12 heads (MHA) or 1
    (MQA) is no GQA: the lines group the heads as a run's default does, and the note says why.  A model's own K/V
    heads equal to its heads (an MHA model) leave GQA's to the fill-in."""
    chosen = kv_cache.variant_settings(emb_dim=768, n_heads=12, n_layers=1, gqa_kv_heads=6)
    assert chosen["GQA"]["n_kv_heads"] == 6 and chosen["SWA+GQA"]["n_kv_heads"] == 6
    assert kv_cache.gqa_note(chosen, 12, 6, "the sidebar's GQA") is None
    for heads, what in ((12, "a K/V head per head, which is MHA"), (1, "one K/V head shared by all the heads, which "
                                                                       "is MQA")):
        mha = kv_cache.variant_settings(emb_dim=768, n_heads=12, n_layers=1, gqa_kv_heads=heads)
        assert mha["GQA"]["n_kv_heads"] == mha["SWA+GQA"]["n_kv_heads"] == 4
        assert kv_cache.gqa_note(mha, 12, heads, "the sidebar's GQA") == (
            f"The sidebar's GQA has {heads} K/V head{'s' if heads > 1 else ''}: {what} (the "
            f"{what[-3:]} line{'s' if heads == 1 else ''}). The GQA lines group the 12 heads into 4 K/V heads, 3 "
            "heads each.")
    assert kv_cache.variant_settings(emb_dim=768, n_heads=12, n_layers=1, n_kv_heads=12)["GQA"]["n_kv_heads"] == 4


@pytest.mark.parametrize("name", [m.name for m in kv_cache.PRESETS])
def test_every_gqa_line_groups_the_heads_and_the_models_own_line_is_named_as_the_table_names_it(name):
    """A GQA line with 1 K/V head is MQA's: every GQA line has 1 < K/V heads < heads, a divisor of the heads, as the
    book's GQA examples choose (Gemma 3 270M, 4 heads with 1 K/V head: its GQA line has 2).  The model as it is
    is one line, named as the presets' table names its attention (Gemma's "MQA + SWA 5:1"), with its bytes."""
    model = kv_cache.preset(name)
    settings = model.variant_settings()
    for line in ("GQA", "SWA+GQA"):
        kv = settings[line]["n_kv_heads"]
        assert 1 < kv < model.n_heads and model.n_heads % kv == 0, (line, kv)
    own = [line for line, kwargs in settings.items()
           if kv_cache.kv_cache_bytes(context_length=model.context_length, dtype=model.dtype, **kwargs) == model.bytes()
           and kwargs.get("latent_dim") == model.latent_dim and kwargs.get("sliding_window_size") ==
           model.sliding_window_size]
    assert own == [model.attention]
    if name == "Gemma 3 270M":
        assert settings["MQA + SWA 5:1"] == {"emb_dim": 640, "n_heads": 4, "n_layers": 18, "head_dim": 256,
                                             "n_kv_heads": 1, "sliding_window_size": 512, "swa_ratio": "5:1"}
        assert settings["GQA"]["n_kv_heads"] == 2


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 7])
def test_heads_that_cannot_be_grouped_get_no_gqa_line_and_the_note_says_why(heads):
    """2 heads (the bundled model), 3 or a prime count have no K/V head count strictly between 1 and the heads that
    divides them: no GQA or SWA+GQA line (it would repeat MQA's or MHA's), and a note says why."""
    settings = kv_cache.variant_settings(emb_dim=64 * heads, n_heads=heads, n_layers=2)
    assert "GQA" not in settings and "SWA+GQA" not in settings
    assert list(settings) == ["MHA", "MQA", "MLA", "SWA"]
    assert kv_cache.gqa_note(settings, heads) == (
        "No GQA line: grouped-query attention shares one K/V head among each group of query heads, so it has more K/V "
        "heads than 1 (MQA) and fewer than the heads (MHA), a count that divides them — and "
        f"{heads} head{'s' if heads > 1 else ''} have no such count.")


def test_a_variants_label_counts_its_k_v_heads_in_the_singular_for_one():
    assert kv_cache.describe("GQA", {"n_heads": 12, "n_kv_heads": 1, "head_dim": 64}) == "GQA (1 K/V head × 64)"
    assert kv_cache.describe("GQA", {"n_heads": 12, "n_kv_heads": 3, "head_dim": 64}) == "GQA (3 K/V heads × 64)"


def test_an_mla_preset_names_its_latent_and_rope_parts():
    deepseek = kv_cache.preset("DeepSeek-V3 671B")
    assert deepseek.latent_dim == 576 and deepseek.rope_dim == 64 and deepseek.n_kv_heads is None
    assert deepseek.latent_text == "512 + 64 rope = 576"


def test_the_cost_charts_byte_axis_labels_powers_of_10_only_in_si_units():
    """Plotly's own log ticks put 2 and 5 between the powers of 10 ("2, 100M, 5, 2, 10M"): one tick a decade, in SI
    units (1G, not Plotly's "1B", which reads as one byte)."""
    lengths = kv_cache.context_lengths(131072)
    fig = generation_figures.kv_bytes_figure(lengths, {"MHA": [2**20 * n for n in range(1, len(lengths) + 1)]},
                                             title="t")
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.exponentformat == "SI"


def test_a_presets_window_is_a_number_or_a_dash_never_none():
    windows = {model.name: model.window_text for model in kv_cache.PRESETS}
    assert windows["GPT-2 124M"] == "—" and "None" not in windows.values()
    assert any(text[0].isdigit() for text in windows.values())  # a model with a sliding window: its W


UNITS = {"B": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}


def near_a_unit_boundary():
    """Byte counts within 1% of 1 kB, 1 MB and 1 GB (where a value rounds up into the next unit), and any size."""
    near = st.integers(1, 3).flatmap(lambda k: st.integers(1000**k - 1000**k // 100, 1000**k + 1000**k // 100))
    return st.one_of(near, st.integers(0, 10**14))


@settings(max_examples=400, deadline=None)
@given(near_a_unit_boundary())
def test_format_bytes_rounds_first_then_picks_the_unit(n):
    """The number shown is n in its unit to the digits shown, below 1,000 (except in GB, the largest unit) and at least
    1 (except in bytes); the unit below would have shown 1,000 or more."""
    number_text, unit = kv_cache.format_bytes(n).split(" ")
    number, size = float(number_text.replace(",", "")), UNITS[unit]
    assert number < 1000 or unit == "GB"
    assert number >= 1 or unit == "B"
    # half the last digit shown, and the float error of number * size (256.46 * 1000 is 256,460.00000000003)
    assert abs(number * size - n) <= (0.5 if unit == "B" else 0.005 * size) + 1e-9 * n
    smaller = [s for s in UNITS.values() if s < size]
    if smaller:  # the unit below would have needed 4 digits before the point
        assert round(n / smaller[-1], 0 if smaller[-1] == 1 else 2) >= 1000


@pytest.mark.parametrize("n, text", [(999, "999 B"), (1000, "1.00 kB"), (999_994, "999.99 kB"), (999_999, "1.00 MB"),
                                     (999_994_999, "999.99 MB"), (999_999_999, "1.00 GB"), (2**32, "4.29 GB")])
def test_format_bytes_at_the_unit_boundaries(n, text):
    assert kv_cache.format_bytes(n) == text


@pytest.mark.parametrize(("windows", "expected"), [
    ((None, None), {}),
    ((3, 3), {"sliding_window_size": 3, "swa_ratio": "1:0"}),  # every layer (a negative or no stride)
    ((3, None, 3, None), {"sliding_window_size": 3, "swa_ratio": "1:1"}),  # the book's stride 1
    ((3, 3, None, 3), {"sliding_window_size": 3, "swa_ratio": "2:1"}),  # stride 2: 3 window layers, 1 full
    ((3, 3, 3, None, 3, 3, 3, None), {"sliding_window_size": 3, "swa_ratio": "3:1"}),
    ((None, 3, None, 3), {"sliding_window_size": 3, "swa_ratio": "1:1"}),  # no "a:b" order gives it: the counts
])
def test_window_schedule_gives_the_window_and_the_ratio_that_count_the_layers(windows, expected):
    assert kv_cache.window_schedule(windows) == expected
    if expected:
        assert kv_cache.layer_split(len(windows), expected["swa_ratio"]) == (sum(w is not None for w in windows),
                                                                    sum(w is None for w in windows))


def test_window_schedule_refuses_layers_with_different_windows():
    with pytest.raises(ValueError, match="differ"):
        kv_cache.window_schedule((3, 5, None))


@pytest.mark.parametrize(("heads", "gqa"), [(4, 2), (6, 3), (8, 4), (12, 4), (16, 4), (25, 5), (32, 4)])
def test_the_gqa_line_filled_in_lies_between_mha_and_mqa_where_the_heads_allow(heads, gqa):
    """The chart's GQA line for a model that names no K/V heads: the divisor of the heads strictly between 1 and the
    heads nearest 4, as a GQA run's default (a 4-head model's GQA line has 2 K/V heads, not MQA's 1)."""
    settings = kv_cache.variant_settings(emb_dim=64 * heads, n_heads=heads, n_layers=1)
    assert settings["GQA"]["n_kv_heads"] == gqa


@pytest.mark.parametrize(("spelling", "short"), [
    ("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"), ("half", "fp16"), ("float8_e4m3fn", "fp8"),
    ("torch.bfloat16", "bf16"), ("float64", "fp64"), ("double", "fp64"), ("torch.float64", "fp64"),
])
def test_torch_spellings_of_a_dtype_count_as_the_short_ones(spelling, short):
    base = dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)
    assert kv_cache.kv_cache_bytes(**base, dtype=spelling) == kv_cache.kv_cache_bytes(**base, dtype=short)


def test_a_torch_dtype_counts_its_own_bytes():
    torch = pytest.importorskip("torch")
    base = dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int8):
        assert kv_cache.kv_cache_bytes(**base, dtype=dtype) == 12 * 1024 * 64 * 12 * 2 * dtype.itemsize


def test_a_float64_cache_counts_8_bytes_an_element():
    """kv_cache_bytes(dtype="fp64") and torch.float64 raised "dtype must be one of …": a module checked in float64
    (attnviz checks those) caches 8 bytes a number."""
    base = dict(context_length=1024, emb_dim=768, n_heads=12, n_layers=12)
    assert kv_cache.dtype_bytes("fp64") == 8
    assert kv_cache.kv_cache_bytes(**base, dtype="fp64") == 2 * kv_cache.kv_cache_bytes(**base, dtype="fp32")


def test_an_unknown_dtype_lists_the_accepted_ones():
    with pytest.raises(ValueError, match=r"dtype must be one of fp64, fp32, bf16, fp16, fp8, int8 \(or torch's "
                                         r"float64, float32, bfloat16, float16 …\), got 'complex64'\."):
        kv_cache.kv_cache_bytes(context_length=8, emb_dim=8, n_heads=2, n_layers=1, dtype="complex64")


def test_deepseeks_rotary_key_is_cached_beside_its_latent_under_its_own_name():
    """DeepSeek-V2's config: kv_lora_rank 512 and qk_rope_head_dim 64 cached per token and layer, 60 layers,
    163,840 tokens, bf16: 60 × 163,840 × (512 + 64) × 2 bytes = 11,324,620,800."""
    v2 = dict(context_length=163840, emb_dim=5120, n_heads=128, n_layers=60, dtype="bf16")
    assert 60 * 163840 * (512 + 64) * 2 == 11_324_620_800
    assert kv_cache.kv_cache_bytes(**v2, latent_dim=512, qk_rope_head_dim=64) == 11_324_620_800
    assert kv_cache.kv_cache_bytes(**v2, latent_dim=576) == 11_324_620_800  # folded by hand, as before
    with pytest.raises(ValueError, match="qk_rope_head_dim .* latent_dim"):
        kv_cache.kv_cache_bytes(**v2, qk_rope_head_dim=64)  # a rotary key beside no latent
    with pytest.raises(ValueError, match="qk_rope_head_dim must be a whole number"):
        kv_cache.kv_cache_bytes(**v2, latent_dim=512, qk_rope_head_dim=-1)


def _windowed_layers(label: str, n_layers: int) -> int:
    """How many layers an SWA label says slide: "on both layers", "on all 12 layers", "on its one layer",
    "on 5 of 6 layers"."""
    if re.search(r"on (both|all \d+|its one) layers?\b", label):
        return n_layers
    found = re.search(r"on (\d+) of (\d+) layers", label)
    assert found and int(found.group(2)) == n_layers, label
    return int(found.group(1))


@pytest.mark.parametrize("n_layers, window, swa_ratio, windowed", [
    (2, None, None, 2),  # the bundled model's sizes: Gemma 3's 5:1 of 2 layers leaves no full layer
    (1, None, None, 1),  # the sidebar's one layer
    (6, None, None, 5),
    (18, None, None, 15),
    (2, 16, "1:0", 2),  # a random SWA GPT: its own window on every layer
    (4, 3, "3:1", 3),  # a checkpoint's sliding_window_stride 3
])
def test_the_swa_label_says_the_real_split_and_window_and_the_curve_agrees(n_layers, window, swa_ratio, windowed):
    """The cost chart's SWA lines name the window they use and how many of the model's layers slide, and their
    curves are those layers' bytes: W per windowed layer past W tokens, every token on the others."""
    settings = kv_cache.variant_settings(emb_dim=128, n_heads=4, n_layers=n_layers, sliding_window_size=window,
                                         swa_ratio=swa_ratio)
    lengths = kv_cache.context_lengths(131072)
    curves = kv_cache.curves(settings, lengths, dtype="fp32")
    per_token_layer = curves["MHA"][0] // (lengths[0] * n_layers)  # MHA: every layer caches every token
    for name in ("SWA", "SWA+GQA"):
        label = kv_cache.describe(name, settings[name])
        used = window or 1024
        assert f"window {used:,} on " in label, label
        assert "5:1 SWA:full" not in label or n_layers >= 6, label  # no ratio the layers cannot hold
        assert _windowed_layers(label, n_layers) == windowed
        heads = settings[name].get("n_kv_heads") or 4
        for n, got in zip(lengths, curves[name]):
            expected = per_token_layer * heads // 4 * (windowed * min(n, used) + (n_layers - windowed) * n)
            assert got == expected, (label, n)
    flat = len(set(curves["SWA"][lengths.index(1024):])) == 1
    assert flat == (windowed == n_layers)  # a flat curve is a model whose every layer slides


@pytest.mark.parametrize("attention", ["gqa", "mla", "swa"])
def test_a_models_cache_settings_splat_gives_the_bytes_its_run_holds(attention):
    """``kv_cache_bytes(**cache_settings(model))`` counts the model's own dtype, not kv_cache_bytes' default bf16."""
    import torch

    from attnviz import models

    model = models.random_gpt(attention)
    steps = models.generate(model, [1, 2, 3, 4, 5, 6], 20).steps
    assert kv_cache.kv_cache_bytes(context_length=26, **models.cache_settings(model)) == steps[-1].cache_bytes
    assert models.cache_settings(model.to(torch.float64))["dtype"] == "fp64"


def test_a_models_own_line_has_its_own_colour_and_the_title_fits_a_narrow_chart():
    """Gemma 3 270M's "MQA + SWA 5:1" line is told apart from MQA's (a colour of its own, dashed as a window's line),
    and the title is broken into lines no wider than the chart at 900 px (Plotly cuts a title at the figure's edge:
    "…dotted: its co")."""
    from attnviz.views import margins

    gemma = kv_cache.preset("Gemma 3 270M")
    settings = gemma.variant_settings()
    lengths = kv_cache.chart_lengths(settings)
    title = "KV cache of DeepSeek-V3 671B with each attention (fp8, batch 1); dotted: its context length"
    labels = {name: kv_cache.describe(name, kwargs) for name, kwargs in settings.items()}
    fig = generation_figures.kv_bytes_figure(lengths, kv_cache.curves(settings, lengths), labels, title=title)
    lines = {trace.name.split(" (")[0]: trace.line for trace in fig.data}
    assert lines["MQA + SWA 5:1"].dash == "dash" and lines["MQA"].dash == "solid"
    assert len({line.color for line in lines.values()}) == len(lines)  # every line its own colour
    shown = fig.layout.title.text
    assert shown.replace("<br>", " ") == title and "<br>" in shown
    assert all(margins.title_px(line, 14) <= generation_figures.COST_MIN_WIDTH - margins.TITLE_INSET_PX
               for line in shown.split("<br>"))
    assert fig.layout.margin.t == margins.title_top(shown.count("<br>") + 1, size=14)  # the plot under all of it
    # a legend entry is as wide as the plot: a long label is broken after a comma into lines that fit it, and says
    # all it said ("SWA (4 K/V heads × 256,<br>window 512 on 15 of 18 layers,<br>5:1 SWA:full)")
    room = generation_figures.COST_MIN_WIDTH - fig.layout.margin.l - fig.layout.margin.r - \
        generation_figures.COST_LEGEND_SAMPLE_PX
    for trace in fig.data:
        assert all(margins.title_px(line, generation_figures.LEGEND_FONT_PX) <= room
                   for line in trace.name.split("<br>")), trace.name
        assert trace.name.replace("<br>", " ") in labels.values()
    assert max(trace.name.count("<br>") for trace in fig.data) > 0  # Gemma's SWA labels do not fit on one line
