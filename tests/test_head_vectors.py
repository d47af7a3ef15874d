"""One head's queries, keys and values from any Trace (``Trace.head_vectors``) and every reader that uses them:
q_i·k_j ÷ √head_dim of the head's vectors is the run's own scaled score at every visible cell, and the head's
weights times its values are the run's own context — for every producer and variant, so a head or a K/V group
picked wrong fails here."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from helpers import user_modules
from helpers.checkpoints import random_gpt2

import attnviz
from attnviz import ablation, models, pipeline, rope, weights
from attnviz.config import AttentionConfig, InputError
from attnviz.explain import ExplainError, explain_weight
from attnviz.producers import model_layer
from attnviz.views import rotation, steps

TEXT = "The cat sat on the mat. The cat sat on"
SIZES = {"d_in": 24, "d_out": 24, "num_heads": 4, "seed": 7, "context_length": 64}
RUNS = {  # the book's classes and the bonus variants through attnviz.run
    "simplified": {"variant": "simplified", "causal": False},
    "self_attention_v1": {"variant": "self_attention_v1"},
    "self_attention_v2": {"variant": "self_attention_v2"},
    "causal": {"variant": "causal"},
    "mha_wrapper": {"variant": "mha_wrapper"},
    "mha": {"variant": "mha"},
    "gqa": {"variant": "gqa", "num_kv_groups": 2},
    "mqa": {"variant": "mqa"},
    "mla": {"variant": "mla"},
    "swa": {"variant": "swa", "sliding_window_size": 3},
    "mha-rotary": {"variant": "mha", "positions": "rotary"},
    "gqa-rotary": {"variant": "gqa", "num_kv_groups": 2, "positions": "rotary", "rope_base": 500_000},
    "mqa-rotary": {"variant": "mqa", "positions": "rotary"},
    "swa-rotary": {"variant": "swa", "sliding_window_size": 3, "positions": "rotary"},
}
SESSION_MODELS = {  # a GPT model trained in the app with a bonus attention, run as a checkpoint's layer
    "checkpoint-gqa": ("grouped-query", {"num_kv_groups": 2}),
    "checkpoint-mqa": ("multi-query", {}),
    "checkpoint-mla": ("latent", {}),
    "checkpoint-swa": ("sliding-window", {"sliding_window_size": 4}),
}


MODULES = {  # users' own modules through attnviz.trace_module: (module, its input width)
    "module-nanogpt": (lambda: user_modules.CausalSelfAttention(flash=False), 32),
    "module-nanogpt-sdpa": (lambda: user_modules.CausalSelfAttention(flash=True), 32),
    "module-nn.MultiheadAttention": (lambda: user_modules.TorchMHA(), 32),
    "module-mha": (lambda: user_modules.MyMultiHeadAttention(), 16),
    "module-gqa-repeated": (lambda: user_modules.GroupedQueryAttention(), 32),
    "module-gqa-sdpa": (lambda: user_modules.GQAWithSDPA(), 32),
    "module-learner-gqa": (lambda: user_modules.LearnerGQA(16, 16, 16, 0.0, 4, num_kv_groups=2), 16),
    "module-learner-mqa-rotary": (lambda: user_modules.LearnerRotaryGQA(16, 16, 16, 0.0, 4, num_kv_groups=1), 16),
    "module-learner-gqa-sdpa": (lambda: user_modules.LearnerGQAWithSDPA(16, 16, 16, 0.0, 4, num_kv_groups=2), 16),
    "module-learner-mla": (lambda: user_modules.LearnerMLA(16, 16, 16, 0.0, 4), 16),
    "module-learner-swa": (lambda: user_modules.LearnerSWA(16, 16, 16, 0.0, 4, sliding_window_size=3), 16),
    "module-gqa-fewer-kv-heads": (lambda: user_modules.BroadcastGQA(), 16),
}
PRODUCERS = [*RUNS, "checkpoint-gpt2", "bundled", *SESSION_MODELS, *MODULES]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Each producer's Trace, built once on first use."""
    built = {}
    folder = tmp_path_factory.mktemp("ckpt")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(weights, "_session_models", type(weights._session_models)())  # forgotten afterwards

        def trace_of(producer: str):
            if producer not in built:
                built[producer] = _build(producer, folder)
            return built[producer]

        yield trace_of
    model_layer._layer_runs.clear()


def _build(producer: str, folder):
    if producer in RUNS:
        return pipeline.run(TEXT, AttentionConfig(**{**SIZES, **RUNS[producer]}))
    if producer == "checkpoint-gpt2":
        random_gpt2(4, n_layer=2, n_head=4, n_embd=32, n_positions=64).save_pretrained(folder / "tiny-gpt2")
        return pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "tiny-gpt2"), layer=1))
    if producer == "bundled":
        return pipeline.run(TEXT, AttentionConfig(checkpoint=str(models.BUNDLED), layer=1))
    if producer in SESSION_MODELS:
        attention, settings = SESSION_MODELS[producer]
        option = weights.register_session_model("head-vectors", producer, models.random_gpt(attention, **settings))
        return pipeline.run(TEXT, AttentionConfig(checkpoint=option.ref, layer=1))
    build, d_in = MODULES[producer]
    torch.manual_seed(3)
    module = build().eval()
    return attnviz.trace_module(module, torch.randn(1, 9, d_in))


def _divisor(trace, head_dim: int) -> float:
    return 1.0 if trace.config.module is None and trace.config.variant == "simplified" else math.sqrt(head_dim)


def _visible(trace, head: int) -> np.ndarray:
    """(n, n) bool: the cells the mask leaves to the softmax (the scaled score goes in as it is)."""
    scaled = trace.steps["scaled"][0, head].astype(np.float64)  # (n, n)
    masked = trace.steps["masked"][0, head].astype(np.float64)  # (n, n)
    with np.errstate(invalid="ignore"):
        return np.isfinite(scaled) & np.isfinite(masked) & (np.abs(masked - scaled) < 1.0)


def _qk(reader: str, trace, head: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, hd) queries and keys of ``head`` as ``reader`` gets them."""
    if reader == "head_vectors":
        vectors = trace.head_vectors(head)
        return vectors.queries, vectors.keys
    if reader == "ablation.trace_qk":
        return ablation.trace_qk(trace, head)
    n = trace.n  # explain_weight: q_i from row i, k_j from column j
    queries = np.stack([explain_weight(trace, head, i, 0).query_vector for i in range(n)])  # (n, hd)
    keys = np.stack([explain_weight(trace, head, n - 1, j).key_vector for j in range(n)])  # (n, hd)
    return queries, keys


@pytest.mark.parametrize("reader", ["head_vectors", "ablation.trace_qk", "explain_weight"])
@pytest.mark.parametrize("producer", PRODUCERS)
def test_q_dot_k_over_root_head_dim_is_the_runs_scaled_score(traces, producer, reader):
    trace = traces(producer)
    for head in range(trace.num_heads):
        queries, keys = _qk(reader, trace, head)
        assert queries.shape[0] == trace.n and keys.shape == queries.shape, (head, queries.shape, keys.shape)
        scaled = queries.astype(np.float64) @ keys.astype(np.float64).T / _divisor(trace, queries.shape[-1])  # (n, n)
        recorded = trace.steps["scaled"][0, head]  # (n, n)
        visible = _visible(trace, head)  # (n, n)
        assert visible.any()
        assert np.allclose(scaled[visible], recorded[visible], rtol=1e-4, atol=1e-4), f"head {head}"


@pytest.mark.parametrize("producer", PRODUCERS)
def test_a_heads_weights_times_its_values_are_its_context(traces, producer):
    trace = traces(producer)
    context = trace.steps["context"][0]  # (h, n, hd), or (n, d_out) for a single-head class
    for head in range(trace.num_heads):
        vectors = trace.head_vectors(head)
        dropped = np.nan_to_num(trace.steps["dropped"][0, head].astype(np.float64))  # (n, n)
        expected = context[head] if context.ndim == 3 else context  # (n, hd_v)
        assert np.allclose(dropped @ vectors.values, expected, rtol=1e-4, atol=1e-4), f"head {head}"


@pytest.mark.parametrize("producer", [name for name in RUNS if name.endswith("rotary")] + ["module-mha"])
def test_the_recorded_projections_turn_into_what_meets_in_qkt(traces, producer):
    """rotated=False gives the head's slice of the recorded projections; rotating it by its positions gives the
    rotated vectors (the same head, the same K/V group); a run without rotation has one answer for both."""
    trace = traces(producer)
    for head in range(trace.num_heads):
        before, after = trace.head_vectors(head, rotated=False), trace.head_vectors(head)
        if trace.config.module is None:
            assert before.kv_head == after.kv_head == trace.config.kv_group(head)
        if not after.rotated:
            assert np.array_equal(before.queries, after.queries) and np.array_equal(before.keys, after.keys)
            continue
        cos, sin = rope.compute_rope_params(before.head_dim, trace.config.rope_base, trace.n)  # (n, hd) each
        for unrotated, rotated in ((before.queries, after.queries), (before.keys, after.keys)):
            turned = rope.apply_rope(torch.from_numpy(np.array(unrotated))[None, None], cos, sin)[0, 0]  # (n, hd)
            assert np.allclose(turned.numpy(), rotated, atol=1e-5), f"head {head}"
        assert np.array_equal(before.values, after.values)


@pytest.mark.parametrize("producer", ["gqa-rotary", "checkpoint-gqa", "mha_wrapper"])
def test_the_steps_pages_tables_show_the_heads_own_vectors(traces, producer):
    trace = traces(producer)
    head = trace.num_heads - 1  # the last head: its K/V group is the last one, never group 0
    vectors = trace.head_vectors(head)
    table = steps.qk_table(trace, head)
    assert list(table["query"]) == [steps._vector_text(q, digits=3) for q in vectors.queries]
    assert list(table["key"]) == [steps._vector_text(k, digits=3) for k in vectors.keys]
    if vectors.rotated:
        before, half = trace.head_vectors(head, rotated=False), vectors.head_dim // 2
        turned = rotation.rotation_of(trace, head)
        q_table, k_table = rotation.pair_table(turned, 1, "q"), rotation.pair_table(turned, 1, "k")
        assert np.array_equal(q_table[["q[1]", f"q[{1 + half}]"]].to_numpy(), before.queries[:, [1, 1 + half]])
        assert np.array_equal(k_table[["k[1]", f"k[{1 + half}]"]].to_numpy(), before.keys[:, [1, 1 + half]])
        assert np.array_equal(k_table[["k′[1]", f"k′[{1 + half}]"]].to_numpy(), vectors.keys[:, [1, 1 + half]])


def test_a_grouped_checkpoints_heads_read_their_own_k_v_group(traces):
    trace = traces("checkpoint-gqa")  # 8 query heads, 2 K/V heads of 16
    assert trace.steps["keys"].shape == (1, trace.n, 32) and trace.num_heads == 8
    assert [trace.head_vectors(head).kv_head for head in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert np.array_equal(trace.head_vectors(5).keys, trace.steps["keys"][0][:, 16:32])


# -------------------------------------------------------------------- shapes that cannot be split

def _tampered(trace, **arrays):
    return dataclasses.replace(trace, steps={**trace.steps, **arrays})


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: {"queries": s["queries"][..., :-1]}, r"Cannot tell which part of the recorded queries \(1, {n}, 23\) "
                                                    r"belongs to head 1 of 4\."),
    (lambda s: {"keys": s["keys"][..., :-1]}, r"Cannot tell which part of the recorded keys \(1, {n}, 11\) belongs to "
                                              r"head 1: their width is not a multiple of head_dim 6\."),
    (lambda s: {"keys": np.concatenate([s["keys"], s["keys"][..., :6]], axis=-1)},
     r"The recorded keys \(1, {n}, 18\) have 3 heads; the maps have 4: "
                                              r"cannot tell which belongs to head 1\."),
])
def test_shapes_that_cannot_be_split_are_a_clear_error_in_explains_words(traces, change, message):
    trace = traces("gqa")  # queries (1, n, 24), keys (1, n, 12): 2 K/V heads of 6
    broken = _tampered(trace, **change(trace.steps))
    message = message.replace("{n}", str(trace.n))
    with pytest.raises(InputError, match=message):
        broken.head_vectors(1)
    with pytest.raises(ExplainError, match=message):
        explain_weight(broken, 1, 2, 1)


def test_a_module_whose_key_heads_do_not_divide_its_heads_is_a_clear_error(traces):
    trace = traces("module-mha")  # 4 heads, per head (1, 4, n, 4)
    broken = _tampered(trace, keys=trace.steps["keys"][:, :3])
    with pytest.raises(InputError, match=r"recorded keys \(1, 3, 9, 4\) have 3 heads; the maps have 4"):
        broken.head_vectors(0)


def test_a_run_without_queries_or_a_head_it_does_not_have_is_a_clear_error(traces):
    trace = traces("mha")
    without = dataclasses.replace(trace, steps={k: v for k, v in trace.steps.items() if k != "queries"})
    with pytest.raises(InputError, match="This run recorded no queries"):
        without.head_vectors(0)
    for head in (4, -1):
        with pytest.raises(InputError, match=f"head {head} is out of range: this run has 4 heads, choose head from 0 "
                                             "to 3"):
            trace.head_vectors(head)
    for head in (1.0, True):
        with pytest.raises(InputError, match="head must be a whole number from 0 to 3"):
            trace.head_vectors(head)


@pytest.mark.parametrize("head", [4, 7, -1, -4])
def test_every_reader_of_a_head_refuses_one_the_run_does_not_have_in_the_same_words(traces, head):
    """A head a 4-head trace has not (4, 7, and −1 or −4, which Python's indexing would read as a head from the end):
    trace.attention_map, head_vectors, explain_weight and figures_of each raise an InputError that says the range in
    the same words, never a raw IndexError or the last head."""
    from attnviz.views import notebook

    trace = traces("mha")
    said = f"head {head} is out of range: this run has 4 heads, choose head from 0 to 3."
    readers = {"attention_map": lambda: trace.attention_map("weights", head),
               "head_vectors": lambda: trace.head_vectors(head),
               "explain_weight": lambda: explain_weight(trace, head, 0, 0),
               "figures_of": lambda: notebook.figures_of(trace, "weights", head)}
    for name, read in readers.items():
        with pytest.raises(InputError) as raised:
            read()
        assert str(raised.value) == said, name


def test_attention_map_names_the_maps_a_run_recorded(traces):
    trace = traces("mha")
    assert trace.attention_map("scores", np.int64(3)).shape == (trace.n, trace.n)
    with pytest.raises(InputError, match="stage must be one of scores, scaled, masked, weights, dropped .* got "
                                         "'queries'"):
        trace.attention_map("queries", 0)  # a vector, not a map
    with pytest.raises(InputError, match="got 'weight'"):
        trace.attention_map("weight", 0)
