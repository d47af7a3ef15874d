"""The training loop, its data, its checkpoint and its command line — tiny, fast runs."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.cli import main as command_line
from attnviz.head_types import BOS_ID
from attnviz.labs.train import (
    RANDOM_HIGH,
    RANDOM_LOW,
    TrainConfig,
    build_model,
    per_position_loss,
    repeat_batch,
    run_metadata,
    sampled_loss,
    save,
    skip_batch,
    text_tokens,
    text_windows,
    train,
)
from attnviz.models import load_checkpoint

pytestmark = pytest.mark.slow  # trains models: the quick tier (-m "not slow") leaves it out

TINY = {"n_layers": 2, "n_heads": 2, "emb_dim": 16, "context_length": 64, "seq_len": 48, "batch_size": 4,
        "negatives": 32, "probe_every": 3, "min_repeat": 4, "max_repeat": 20, "repeat_lengths": (24, 48),
        "skip_first": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_train_reports_every_step_and_measures_heads():
    calls = []
    model, history = train(TrainConfig(steps=7, **TINY), on_step=lambda *args: calls.append(args))
    assert [step for step, _, _ in calls] == list(range(7)) == history.steps
    measured = [step for step, _, scores in calls if scores is not None]
    assert measured == [0, 3, 6] == history.probe_steps  # every probe_every steps and the last
    for _, loss, scores in calls:
        assert np.isfinite(loss)
        if scores is not None:
            assert scores["induction"].shape == scores["previous_token"].shape == (2, 2)  # (layers, heads)
            assert ((scores["induction"] >= 0) & (scores["induction"] <= 1)).all()
    assert not history.stopped
    assert not model.training


def test_should_stop_ends_early_with_the_model_so_far():
    steps = []
    model, history = train(TrainConfig(steps=50, **TINY), on_step=lambda step, loss, scores: steps.append(step),
                           should_stop=lambda: len(steps) >= 2)
    assert history.stopped
    assert history.steps == steps == [0, 1]
    assert isinstance(model, torch.nn.Module)


def test_training_reduces_the_loss_and_is_reproducible():
    cfg = TrainConfig(steps=30, lr=1e-2, warmup_steps=5, **(TINY | {"probe_every": 100, "text_fraction": 1.0}))
    _, first = train(cfg)
    _, again = train(cfg)
    assert first.loss == again.loss  # same seed, same run
    assert np.mean(first.loss[-5:]) < np.mean(first.loss[:5]) - 0.25  # learning (deterministic: seeded)


def test_repeat_batch_ends_in_a_repeat():
    rng = np.random.default_rng(0)
    batch = repeat_batch(41, 20, rng, min_repeat=3, max_repeat=20)
    assert batch.shape == (20, 41)
    assert (batch[:, 0] == BOS_ID).all()
    assert RANDOM_LOW <= batch[:, 1:].min() and batch[:, 1:].max() < RANDOM_HIGH  # noqa: SIM300
    lengths = set()
    for row in batch:
        body = row[1:]
        T = max(t for t in range(1, 21) if (body[-t:] == body[-2 * t:-t]).all())
        lengths.add(T)
    assert len(lengths) > 3  # the repeat length varies, so the repeat's position does too


def test_masks_mark_exactly_the_predictable_tokens():
    rows, known = repeat_batch(60, 10, np.random.default_rng(4), min_repeat=3, max_repeat=12, max_copies=3,
                               with_mask=True)
    for row, row_known in zip(rows, known):
        first = int(np.argmax(row_known))  # the first token that repeats an earlier one at period T
        assert row_known[first:].all() and not row_known[:first].any()
        T = next(t for t in range(1, 13) if (row[first:] == row[first - t:len(row) - t]).all())
        assert row[first] == row[first - T]
    rows, copies = skip_batch(50, 6, np.random.default_rng(5), with_mask=True)
    assert (rows[:, 2:][copies[:, 2:]] == rows[:, :-2][copies[:, 2:]]).all()
    assert not copies[:, :3].any()  # BOS and the first two tokens copy nothing


def test_skip_batch_copies_the_token_two_back():
    batch = skip_batch(201, 8, np.random.default_rng(0), p=0.5)
    assert batch.shape == (8, 201)
    assert (batch[:, 0] == BOS_ID).all()
    body = batch[:, 1:]
    copies = body[:, 2:] == body[:, :-2]  # (8, 198)
    assert 0.4 < copies.mean() < 0.6
    assert (body[:, 1:] == body[:, :-1]).mean() < 0.05  # the token right before is not the pattern


def test_text_splits_are_disjoint_and_windows_have_bos():
    from pydoc_data.topics import topics

    from attnviz.tokens import decode

    heldout = decode(text_tokens("heldout_english")[:400].tolist())
    held_topics = [t for t in topics.values() if t[:200] in heldout]
    assert held_topics  # the held-out stream starts with a held-out topic …
    assert held_topics[0][:200] not in decode(text_tokens("train").tolist())  # … that training never sees
    windows = text_windows("heldout_code", 30, 5, np.random.default_rng(0))
    assert windows.shape == (5, 30)
    assert (windows[:, 0] == BOS_ID).all()


def test_sampled_loss_is_at_most_the_full_loss():
    model = build_model(TrainConfig(**TINY))
    ids = torch.as_tensor(repeat_batch(40, 3, np.random.default_rng(1), min_repeat=4, max_repeat=10))
    sampled = sampled_loss(model, ids, 64, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids[:, :-1])  # (b, n-1, vocab)
    full = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
    assert sampled.item() <= full.item() + 1e-5  # a softmax over fewer ids has a smaller partition sum


def test_per_position_loss_is_the_full_cross_entropy():
    model = build_model(TrainConfig(**TINY)).eval()
    ids = repeat_batch(20, 2, np.random.default_rng(2), min_repeat=4, max_repeat=8)
    loss = per_position_loss(model, ids)
    assert loss.shape == (2, 19)
    with torch.no_grad():
        log_probs = torch.log_softmax(model(torch.as_tensor(ids[:1, :-1])), dim=-1)[0]  # (19, vocab)
    expected = -log_probs[torch.arange(19), torch.as_tensor(ids[0, 1:])]
    np.testing.assert_allclose(per_position_loss(model, ids[0]), expected.numpy(), rtol=1e-5)


def test_saved_checkpoint_loads_with_load_checkpoint(tmp_path):
    cfg = TrainConfig(steps=2, **TINY)
    model, history = train(cfg)
    out = save(model, tmp_path / "run", run_metadata(cfg, history, {"induction": [[0.5]]}), dtype=torch.float32)
    loaded = load_checkpoint(out)
    ids = torch.as_tensor(repeat_batch(30, 2, np.random.default_rng(3), min_repeat=4, max_repeat=10))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), atol=1e-5, rtol=1e-5)
    meta = json.loads((out / "training.json").read_text())
    assert meta["config"]["seed"] == 0
    assert meta["steps_run"] == 2
    assert meta["scores"] == {"induction": [[0.5]]}
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as handle:
        assert json.loads(handle.metadata()["attnviz"]) == meta
        assert "lm_head.weight" not in set(handle.keys())  # tied to wte, as GPT-2


def test_command_line_writes_a_loadable_half_precision_checkpoint(tmp_path, capsys):
    args = ["train", "--steps", "2", "--out", str(tmp_path / "cli"), "--seed", "5", "--threads", "1", "--quiet"]
    assert command_line(args) == 0
    assert "wrote" in capsys.readouterr().out
    model = load_checkpoint(tmp_path / "cli")
    assert model.tok_emb.weight.dtype == torch.float32
    meta = json.loads((tmp_path / "cli" / "training.json").read_text())
    assert meta["config"]["seed"] == 5 and meta["trained_by"] == "attnviz train"
    with pytest.raises(SystemExit):
        command_line(["train", "--steps", "0", "--out", str(tmp_path / "bad")])
    with pytest.raises(SystemExit):
        command_line(["train", "--steps", "1", "--out", str(tmp_path / "bad"), "--set", "no_such_field=1"])


def test_command_line_overrides_are_recorded(tmp_path):
    out = tmp_path / "tiny"
    sets = [f"--set={key}={json.dumps(value)}" for key, value in TINY.items()]
    assert command_line(["train", "--steps", "1", "--out", str(out), "--threads", "1", "--quiet", *sets]) == 0
    config = json.loads((out / "training.json").read_text())["config"]
    assert config["emb_dim"] == 16 and config["repeat_lengths"] == [24, 48]
    assert load_checkpoint(out).trf_blocks[0].att.num_heads == 2


def test_the_induction_recipes_frozen_parts_never_move():
    """frozen_embeddings, attention_only and random_ov_heads: what they freeze is bitwise the same after
    training, and everything else trains."""
    cfg = TrainConfig(steps=6, **(TINY | {"n_heads": 4, "random_ov_heads": 2, "frozen_embeddings": True,
                                          "attention_only": True, "skip_first": 0}))
    before = build_model(cfg)
    model, _ = train(cfg)
    att, att0 = model.trf_blocks[0].att, before.trf_blocks[0].att
    frozen = slice(0, 2 * att.head_dim)  # heads 0 and 1 of block 0
    assert torch.equal(model.tok_emb.weight, before.tok_emb.weight)
    assert model.out_head.weight is model.tok_emb.weight  # still tied
    assert torch.equal(att.W_value.weight[frozen], att0.W_value.weight[frozen])
    assert torch.equal(att.out_proj.weight[:, frozen], att0.out_proj.weight[:, frozen])
    assert att0.W_value.weight[frozen].std() > 3 * att0.W_value.weight[2 * att.head_dim:].std()  # N(0, 1/d), not 0.02
    assert not torch.equal(att.W_value.weight[2 * att.head_dim:], att0.W_value.weight[2 * att.head_dim:])
    assert not torch.equal(att.W_query.weight, att0.W_query.weight)
    assert not torch.equal(model.pos_emb.weight, before.pos_emb.weight)
    for block in model.trf_blocks:  # attention-only: every feed-forward adds exactly zero
        assert not block.ff.layers[2].weight.any() and not block.ff.layers[2].bias.any()
        x = torch.randn(2, 5, cfg.emb_dim)
        assert not block.ff(x).any()



def test_the_attention_only_forward_is_the_books_forward(monkeypatch):
    """Training an attention-only model skips the blocks' feed-forward halves (they add exactly zero) and runs
    each block's attention as fused kernels: the same forward and the same gradients as the book's classes."""
    from attnviz.labs import train as train_module
    from attnviz.labs.train import _hidden

    for heads in (2, 4):
        model = build_model(TrainConfig(**(TINY | {"attention_only": True, "n_heads": heads,
                                                    "random_ov_heads": min(heads, 2)})))
        with torch.no_grad():  # the random-frozen heads' slices are random but small: make every term count
            for block in model.trf_blocks:
                block.norm1.scale.normal_(1.0, 0.3)
                block.norm1.shift.normal_(0.0, 0.3)
                block.att.W_query.weight.normal_(0.0, 0.5)
                block.att.W_key.weight.normal_(0.0, 0.5)
        ids = torch.as_tensor(repeat_batch(40, 3, np.random.default_rng(4), min_repeat=4, max_repeat=10))
        target = torch.randn(3, 40, TINY["emb_dim"])
        grads = []
        for attention_only in (True, False):
            model.zero_grad(set_to_none=True)
            hidden = _hidden(model, ids, attention_only=attention_only)  # (3, 40, d)
            (hidden * target).sum().backward()
            grads.append((hidden.detach(), {name: p.grad.clone() for name, p in model.named_parameters()
                                            if p.grad is not None}))
        (fused, fused_grads), (book, book_grads) = grads
        torch.testing.assert_close(fused, book, rtol=1e-5, atol=1e-5)
        skipped = {k for k in book_grads if ".ff." in k or ".norm2." in k}  # the zero second half: not run
        assert fused_grads.keys() == book_grads.keys() - skipped
        assert all(not book_grads[k].any() for k in skipped)  # … and the book's gradient through it is zero
        scale = max(grad.norm() for grad in book_grads.values())  # fp32 in other kernels: rounding at this scale
        for name, grad in fused_grads.items():  # (W_key's bias: exactly zero in theory, rounding in both)
            assert (grad - book_grads[name]).norm() <= 1e-5 * scale + 1e-4 * book_grads[name].norm(), name
        model.trf_blocks[0].att.dropout.p = 0.5  # with dropout the book's modules run as they are (training mode)
        monkeypatch.setattr(train_module, "_fused_attention_half", lambda block, x: pytest.fail("fused with dropout"))
        _hidden(model, ids, attention_only=True)
        monkeypatch.undo()


