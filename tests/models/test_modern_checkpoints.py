"""A checkpoint of the book's grouped-query or latent GPT (``ch04/04_gqa``, ``05_mla``) loads as the model it is:
grouped-query (and multi-query) from W_key's rows, latent from W_DKV's, with or without the ``cfg`` the book's script
builds; a config that contradicts the tensors is refused in words.  Every checkpoint here is attnviz's own
``GPTModel(cfg)`` with random weights (LayerNorms and biases too), saved with ``torch.save(model.state_dict())``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz import models, pipeline
from attnviz.config import AttentionConfig
from attnviz.models.gpt import GROUPED_QUERY, LATENT, MULTI_QUERY
from tests.helpers.checkpoints import book_modern_cfg, random_modern_gpt

TEXT = "one two three four five six seven eight"
KINDS = {  # name -> (attention, settings, what the loaded attention must say)
    "gqa": (GROUPED_QUERY, {"num_kv_groups": 2}, {"num_kv_groups": 2, "group_size": 2}),
    "mqa": (MULTI_QUERY, {}, {"num_kv_groups": 1, "group_size": 4}),
    "mla": (LATENT, {"latent_dim": 48}, {"latent_dim": 48}),
}


@pytest.fixture(scope="module", params=list(KINDS))
def saved(request, tmp_path_factory):
    """(kind, the model, its folder): ``bare.pth`` (the state dict alone), ``with-cfg.pth`` (a dict holding it and the
    book's cfg) and ``json/model.pth`` with ``json/config.json``."""
    attention, settings, _ = KINDS[request.param]
    model = random_modern_gpt(attention, seed=3, **settings)
    folder = tmp_path_factory.mktemp(request.param)
    torch.save(model.state_dict(), folder / "bare.pth")
    torch.save({"model_state_dict": model.state_dict(), "cfg": book_modern_cfg(model)}, folder / "with-cfg.pth")
    (folder / "json").mkdir()
    torch.save(model.state_dict(), folder / "json" / "model.pth")
    (folder / "json" / "config.json").write_text(json.dumps(book_modern_cfg(model)))
    return request.param, model, folder


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]))  # (1, n) -> (1, n, vocab)


@pytest.mark.parametrize("name", ["bare.pth", "with-cfg.pth", "json/model.pth"])
def test_loads_as_the_model_it_is_and_gives_its_logits(saved, name):
    kind, model, folder = saved
    attention, _, expected = KINDS[kind]
    loaded = models.load_checkpoint(folder / name)
    att = loaded.trf_blocks[1].att
    assert type(att) is type(model.trf_blocks[1].att)
    assert att.num_heads == 4 and att.head_dim == 64
    for key, value in expected.items():
        assert getattr(att, key) == value, key
    assert loaded.heads_assumed is (name == "bare.pth")  # heads 64 wide, as a GPT-2 size: said where assumed
    ids = [3, 1415, 92, 7, 256, 11, 40000, 5]
    assert torch.allclose(logits(loaded, ids), logits(model, ids), atol=1e-5)
    assert set(loaded.state_dict()) == set(model.state_dict())  # nothing added (no mask buffer a class lacks)


def _reference_maps(model, token_ids, layer: int) -> np.ndarray:
    """Layer ``layer``'s attention weights (heads, n, n), written out from the state dict: x = the LayerNorm'd block
    input, q = x·W_qᵀ + b per head; grouped-query: k per K/V head, query head h uses K/V head h // (H / G); latent:
    k = (x·W_DKVᵀ + b)·W_UKᵀ + b per head; softmax((q·kᵀ)/√hd) over the keys up to the query."""
    state = {key: value.double() for key, value in model.state_dict().items()}
    with torch.no_grad():
        x = models.trace_layer(model, token_ids, layer).steps["norm1"][0].double()  # (n, d)
    prefix = f"trf_blocks.{layer}.att."
    n, heads, hd = x.shape[0], 4, x.shape[1] // 4
    q = (x @ state[prefix + "W_query.weight"].T + state[prefix + "W_query.bias"]).reshape(n, heads, hd)
    if prefix + "W_DKV.weight" in state:
        latent = x @ state[prefix + "W_DKV.weight"].T + state[prefix + "W_DKV.bias"]  # (n, latent)
        k = (latent @ state[prefix + "W_UK.weight"].T + state[prefix + "W_UK.bias"]).reshape(n, heads, hd)
    else:
        k = (x @ state[prefix + "W_key.weight"].T + state[prefix + "W_key.bias"]).reshape(n, -1, hd)  # (n, G, hd)
        k = k[:, [h // (heads // k.shape[1]) for h in range(heads)]]  # (n, G, hd) -> (n, H, hd)
    scores = torch.einsum("qhd,khd->hqk", q, k) / hd**0.5  # (H, n, n)
    scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(scores, dim=-1).numpy()


def test_every_query_heads_map_is_the_formulas(saved):
    kind, model, folder = saved
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "with-cfg.pth"), layer=1))
    maps = trace.steps["weights"][0]  # (heads, n, n)
    assert maps.shape[0] == 4
    assert np.allclose(maps, _reference_maps(model, list(trace.token_ids), 1), atol=1e-5)


@pytest.mark.parametrize(("change", "said"), [
    ({"n_kv_groups": 4}, "n_kv_groups 4"),
    ({"n_heads": 8}, "K/V heads"),
])
def test_a_grouped_query_config_that_contradicts_the_tensors_is_refused_in_words(change, said, tmp_path):
    model = random_modern_gpt(GROUPED_QUERY, num_kv_groups=2)
    path = tmp_path / "gqa.pth"
    torch.save({"model_state_dict": model.state_dict(), "cfg": {**book_modern_cfg(model), **change}}, path)
    with pytest.raises(models.CheckpointError, match=said) as raised:
        models.load_checkpoint(path)
    assert "config" in str(raised.value) and "Traceback" not in str(raised.value)


def test_a_latent_config_that_contradicts_the_tensors_is_refused_in_words(tmp_path):
    model = random_modern_gpt(LATENT, latent_dim=48)
    path = tmp_path / "mla.pth"
    torch.save({"model_state_dict": model.state_dict(), "cfg": {**book_modern_cfg(model), "latent_dim": 32}}, path)
    with pytest.raises(models.CheckpointError, match="latent_dim 32.*W_DKV gives 48"):
        models.load_checkpoint(path)


def test_a_multi_head_file_whose_config_names_k_v_groups_is_refused(tmp_path):
    model = random_modern_gpt("multi-head")
    path = tmp_path / "mha.pth"
    torch.save({"model_state_dict": model.state_dict(), "cfg": {**book_modern_cfg(model), "n_kv_groups": 2}}, path)
    with pytest.raises(models.CheckpointError, match="n_kv_groups 2"):
        models.load_checkpoint(path)


def test_a_file_that_is_neither_is_refused_in_words(tmp_path):
    """A W_key whose rows are no whole number of heads: not the book's multi-head, grouped-query or latent model."""
    model = random_modern_gpt(GROUPED_QUERY, num_kv_groups=2)
    state = model.state_dict()
    for layer in range(2):
        state[f"trf_blocks.{layer}.att.W_key.weight"] = state[f"trf_blocks.{layer}.att.W_key.weight"][:100]
        state[f"trf_blocks.{layer}.att.W_key.bias"] = state[f"trf_blocks.{layer}.att.W_key.bias"][:100]
    path = tmp_path / "odd.pth"
    torch.save(state, path)
    with pytest.raises(models.CheckpointError, match="W_key gives 100 values per token, not a whole number of heads"):
        models.load_checkpoint(path)


def test_a_file_whose_w_key_does_not_fit_its_own_config_is_not_told_to_add_one(tmp_path):
    """With a config beside the file, a W_key of no whole number of its heads is a damaged file or another model's
    config: the message says so, not "put a config beside the file" (a dead end: there is one)."""
    model = random_modern_gpt(GROUPED_QUERY, num_kv_groups=2)
    state = model.state_dict()
    for layer in range(2):
        state[f"trf_blocks.{layer}.att.W_key.weight"] = state[f"trf_blocks.{layer}.att.W_key.weight"][:100]
    path = tmp_path / "cut.pth"
    torch.save({"model_state_dict": state, "cfg": book_modern_cfg(model)}, path)
    with pytest.raises(models.CheckpointError) as raised:
        models.load_checkpoint(path)
    said = str(raised.value)
    assert "not a whole number of heads" in said and "does not fit its config" in said
    assert "put a config beside the file" not in said


# ============================== the run says what it is ==============================


def test_a_run_of_such_a_checkpoint_is_the_variant_it_holds_with_its_real_shapes(saved):
    kind, model, folder = saved
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "with-cfg.pth"), layer=0))
    config, shapes = trace.config, dict(trace.shapes)
    n = trace.n
    assert config.variant == kind and isinstance(model.trf_blocks[0].att, config.spec.cls)
    assert config.spec.shape_path == tuple(name for name, _ in trace.shapes)  # the diagram's nodes are the run's
    if kind == "mla":
        assert config.latent_width == 48 and shapes["latent"] == (1, n, 48)
        assert shapes["keys"] == (1, n, 256)  # up-projected: one per query head
    else:
        groups = KINDS[kind][2]["num_kv_groups"]
        assert config.kv_groups == groups and config.group_size == 4 // groups
        assert shapes["keys"] == (1, n, groups * 64) and shapes["kv_groups"] == (1, groups, n, 64)
        assert shapes["kv_repeat"] == (1, 4, n, 64)
        assert config.head_label(3) == f"head 3 · K/V group {3 // (4 // groups)}"


@pytest.mark.parametrize("head", [0, 3])
def test_explain_weight_uses_the_key_of_the_query_heads_group(saved, head):
    """products.sum() is the recorded score; the key is K/V head h // (H/G)'s (MLA: the up-projected key)."""
    from attnviz import explain

    kind, model, folder = saved
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "with-cfg.pth"), layer=1))
    query, key = trace.n - 1, 2
    weight = explain.explain_weight(trace, head, query, key)
    assert weight.products.sum() == pytest.approx(weight.score, rel=1e-6)
    assert weight.score == pytest.approx(float(trace.steps["scores"][0, head, query, key]), rel=1e-4, abs=1e-5)
    assert weight.weight == pytest.approx(float(trace.steps["weights"][0, head, query, key]), rel=1e-5)
    assert not weight.notes
    keys = trace.steps["keys"][0]  # (n, G·hd) or MLA's (n, H·hd)
    kv_head = head if kind == "mla" else head // (4 // KINDS[kind][2]["num_kv_groups"])
    assert np.array_equal(weight.key_vector, keys[key, kv_head * 64:(kv_head + 1) * 64])


def test_heads_assumed_says_the_k_v_heads_it_took(saved):
    kind, _, folder = saved
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "bare.pth")))
    said = [note for note in trace.notes if "taken to be 64 wide" in note]
    assert len(said) == 1 and "4 heads" in said[0], trace.notes
    if kind != "mla":
        groups = KINDS[kind][2]["num_kv_groups"]
        assert f"{groups} K/V head" in said[0]


def test_the_notebook_view_titles_each_head_with_its_k_v_head(saved):
    from attnviz.views import notebook

    kind, _, folder = saved
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(folder / "with-cfg.pth")))
    drawn = notebook.figures_of(trace, head=3)
    titles = [note["text"].removeprefix("▶ ") for note in drawn["grid"].to_dict()["layout"]["annotations"]
              if "head" in note["text"]]
    if kind == "mla":
        assert titles == ["head 0", "head 1", "head 2", "head 3"]
        assert "latent" in drawn["flow"] and f"(1, {trace.n}, 48)" in drawn["flow"]
    else:
        groups = KINDS[kind][2]["num_kv_groups"]
        assert titles == [f"head {h}<br>K/V {h // (4 // groups)}" for h in range(4)]
        assert drawn["head"].layout.title.text.startswith(f"head 3 · K/V group {groups - 1}")
        assert f"(1, {groups}, {trace.n}, 64)" in drawn["flow"]  # the K/V heads before the repeat


def test_value_weighted_moves_what_the_attention_output_is_made_of(saved):
    """Σ_h Σ_j α_ij f^h(x_j) + out_proj's bias is the attention's output: f^h reads head h's own values (its K/V
    head's; MLA: up-projected from the latent)."""
    from attnviz.models import interventions

    _, model, _ = saved
    att = model.trf_blocks[0].att
    x = torch.randn(1, 7, 256, generator=torch.Generator().manual_seed(0))  # (1, n, d)
    with torch.no_grad():
        norms, f = interventions._value_weighted(att, x)  # (h, n, n), (h, n, d)
        weights = norms / f.norm(dim=-1)[:, None, :]  # α (h, n, n)
        made = torch.einsum("hij,hjd->id", weights, f)  # (n, d)
        bias = att.out_proj.bias if att.out_proj.bias is not None else 0
        assert torch.allclose(made + bias, att(x)[0], atol=1e-4)
    assert models.value_weighted(model, [5, 6, 7]).shape == (2, 4, 3, 3)


def test_a_config_naming_a_sliding_window_for_a_grouped_query_file_is_refused(tmp_path):
    model = random_modern_gpt(GROUPED_QUERY, num_kv_groups=2)
    path = tmp_path / "gqa.pth"
    cfg = {**book_modern_cfg(model), "sliding_window_size": 4}
    torch.save({"model_state_dict": model.state_dict(), "cfg": cfg}, path)
    with pytest.raises(models.CheckpointError, match="sliding window.*grouped-query attention model"):
        models.load_checkpoint(path)
