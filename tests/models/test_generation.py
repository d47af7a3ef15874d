"""Generation with the KV cache (attnviz.models.generate) against references computed here: a greedy loop of plain
full forwards, Hugging Face's GPT-2 (greedy ids, attention and logits, eager), on the bundled model and on a random
GPT-2-shaped checkpoint written with save_pretrained (every LayerNorm and bias randomised)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.checkpoints import random_gpt2

from attnviz import models, tokens
from attnviz.models import CachedMultiHeadAttention, check_step, check_steps, generate, load_checkpoint
from attnviz.models.generation import clip

transformers = pytest.importorskip("transformers")

PROMPT = "The cat sat on the mat. The cat"
NEW = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("generate") / "gpt2-shaped"
    random_gpt2(7, n_layer=3, n_head=4, n_embd=64, n_positions=40).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module", params=["bundled", "checkpoint"])
def pair(request, checkpoint):
    """(attnviz's GPTModel, Hugging Face's GPT2LMHeadModel) of the same files."""
    path = str(models.BUNDLED) if request.param == "bundled" else checkpoint
    hf = transformers.GPT2LMHeadModel.from_pretrained(path, attn_implementation="eager",
                                                      torch_dtype=torch.float32).eval()
    return load_checkpoint(path), hf


def greedy_reference(model, ids: list[int], new: int) -> list[int]:
    """Greedy by plain full forwards, no cache: the book's generate_text_simple."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(new):
            logits = model(torch.tensor([ids]))  # (1, n, vocab)
            ids.append(int(logits[0, -1].argmax()))
    return ids


def hf_greedy(hf, ids: list[int], new: int) -> list[int]:
    ids = list(ids)
    with torch.no_grad():
        for _ in range(new):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids


def test_cached_ids_equal_uncached_and_the_references(pair):
    model, hf = pair
    prompt = tokens.encode(PROMPT)
    cached = generate(model, prompt, NEW)
    uncached = generate(model, prompt, NEW, use_cache=False)
    assert cached.token_ids[:len(prompt)] == prompt and len(cached.token_ids) == len(prompt) + NEW
    assert cached.token_ids == uncached.token_ids == greedy_reference(model, prompt, NEW) == hf_greedy(hf, prompt, NEW)
    assert cached.new_tokens == cached.token_ids[len(prompt):]
    assert [step.next_token for step in cached.steps[:-1]] == cached.new_tokens  # each step chose the next one


def test_every_steps_rows_and_logits_equal_hugging_faces_full_forward(pair):
    model, hf = pair
    prompt = tokens.encode(PROMPT)
    result = generate(model, prompt, NEW)
    assert len(result.steps) == NEW + 1
    n_layers, n_heads = hf.config.n_layer, hf.config.n_head
    head_dim = hf.config.n_embd // n_heads
    with torch.no_grad():
        out = hf(torch.tensor([result.token_ids]), output_attentions=True)
    attentions = torch.stack(out.attentions)[:, 0].numpy()  # (L, h, N, N)
    for index, step in enumerate(result.steps):
        first = 0 if index == 0 else len(prompt) + index - 1
        end = len(prompt) + index
        q = end - first
        assert step.position == first
        assert step.weights.shape == (n_layers, n_heads, q, end)  # q = the prompt's length, then 1
        np.testing.assert_allclose(step.weights, attentions[:, :, first:end, :end], atol=1e-5, rtol=0)
        np.testing.assert_allclose(step.logits, out.logits[0, end - 1].numpy(), atol=1e-4, rtol=1e-5)
        assert step.top_ids == [int(i) for i in torch.topk(out.logits[0, end - 1], 5).indices]
        expected = {"cache_k": (1, end, n_heads, head_dim), "cache_v": (1, end, n_heads, head_dim)}  # the book's
        assert step.cache_shapes == [expected] * n_layers
        assert step.cache_bytes == n_layers * 2 * end * n_heads * head_dim * 4  # float32
        assert np.isclose(sum(step.top_probs), float(torch.softmax(out.logits[0, end - 1], -1).topk(5).values.sum()))


def test_uncached_steps_have_the_same_rows_and_no_cache(pair):
    model, _ = pair
    prompt = tokens.encode(PROMPT)
    cached, uncached = generate(model, prompt, 5), generate(model, prompt, 5, use_cache=False)
    for a, b in zip(cached.steps, uncached.steps):
        assert a.weights.shape == b.weights.shape and a.fed[-1] == b.fed[-1]
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-5, rtol=0)
        assert b.cache_bytes == 0 and all(shapes == {} for shapes in b.cache_shapes)


def test_check_step_passes_every_step_and_catches_a_position_that_never_advances(pair, monkeypatch):
    model, _ = pair
    prompt = tokens.encode(PROMPT)
    result = generate(model, prompt, 4)
    assert all(check_step(model, result, i).ok for i in range(len(result.steps)))
    assert all(check.ok for check in check_steps(model, result))  # one forward of the whole sequence checks them all

    forward = CachedMultiHeadAttention.forward

    def stuck(self, x, recorder=None, use_cache=False):  # the learner's bug: ptr_current_pos never moves
        out = forward(self, x, recorder, use_cache)
        self.ptr_current_pos = 0
        return out

    monkeypatch.setattr(CachedMultiHeadAttention, "forward", stuck)
    broken = generate(model, prompt, 4)
    checks = [check_step(model, broken, i) for i in range(len(broken.steps))]
    assert checks[0].ok and not any(c.ok for c in checks[1:])
    assert checks[1].weights_diff > 1e-3
    at_once = check_steps(model, broken)
    assert [c.ok for c in at_once] == [c.ok for c in checks]
    for one, every in zip(checks, at_once):
        assert abs(one.weights_diff - every.weights_diff) < 1e-5 and abs(one.logits_diff - every.logits_diff) < 1e-3


def test_generation_leaves_no_cache_and_the_plain_forward_unchanged(pair):
    model, hf = pair
    prompt = tokens.encode(PROMPT)
    generate(model, prompt, 3)
    assert model.current_pos == 0
    for block in model.trf_blocks:
        assert block.att.cache_tensors() == {} and block.att.ptr_current_pos == 0
    with torch.no_grad():
        np.testing.assert_allclose(model(torch.tensor([prompt]))[0].numpy(),
                                   hf(torch.tensor([prompt])).logits[0].numpy(), atol=1e-4, rtol=1e-5)
    assert generate(model, prompt, 3).token_ids == generate(model, prompt, 3).token_ids


def test_two_sequences_in_a_row_with_the_books_reset(pair):
    """The book's protocol by hand: reset, prefill, one token at a time; a second sequence after a reset."""
    model, _ = pair
    model.eval()
    for text in ("Hello, I am", "A quite different and longer prompt here"):
        ids = tokens.encode(text)
        with torch.no_grad():
            model.reset_kv_cache()
            model(torch.tensor([ids[:3]]), use_cache=True)
            for position, token in enumerate(ids[3:], start=3):
                last = model(torch.tensor([[token]]), use_cache=True)[0, -1]
                assert model.current_pos == position + 1
            full = model(torch.tensor([ids]))[0, -1]
        model.reset_kv_cache()
        np.testing.assert_allclose(last.numpy(), full.numpy(), atol=1e-4, rtol=1e-5)


def test_new_tokens_are_clipped_at_the_context_with_a_notice(checkpoint):
    model = load_checkpoint(checkpoint)  # context 40
    prompt = tokens.encode(PROMPT)
    result = generate(model, prompt, 1000)
    assert len(result.token_ids) == 40 and len(result.steps) == 40 - len(prompt) + 1
    assert any("1,000 new tokens would pass the model's context of 40" in n for n in result.notices)
    long = list(range(100, 150))  # 50 tokens: the last 35 are kept, so that the 5 new tokens fit
    result = generate(model, long, 5)
    assert result.token_ids[:35] == long[-35:] and len(result.token_ids) == 40 and len(result.steps) == 6
    assert result.notices == ["The prompt has 50 tokens and the model's context is 40: generation continues its "
                              "last 35, so that the 5 new tokens fit."]


@pytest.mark.parametrize("prompt_length, asked, kept, new", [
    (10, 5, 10, 5),  # fits
    (38, 5, 35, 5),  # the prompt gives up its beginning to the new tokens
    (40, 5, 35, 5),  # a prompt that fills the context: still 5 new
    (50, 0, 40, 0),  # nothing new: the prompt keeps the whole context
    (50, 39, 20, 20),  # more than fits: the prompt keeps half the context
    (8, 1000, 8, 32),  # a short prompt is kept whole; the new tokens fill the rest
    (1, 1000, 1, 39),
])
def test_every_clip_fits_the_context_and_generates_when_it_can(checkpoint, prompt_length, asked, kept, new):
    model = load_checkpoint(checkpoint)  # context 40
    got_kept, got_new, notices = clip(model, prompt_length, asked)
    assert (got_kept, got_new) == (kept, new)
    assert got_kept + got_new <= 40 and (got_new > 0 or asked == 0)
    assert len(notices) == (kept < prompt_length or new < asked)  # one notice, when something was cut


@pytest.mark.parametrize("bad", [[], [-1], [50257], ["x"], None])
def test_bad_prompts_raise_a_message(checkpoint, bad):
    with pytest.raises(ValueError, match="is empty|Token ids must be|whole numbers"):
        generate(load_checkpoint(checkpoint), bad, 3)


@pytest.mark.parametrize("bad", [-1, 2.5, "3", True])
def test_bad_counts_raise_a_message(checkpoint, bad):
    with pytest.raises(ValueError, match="max_new_tokens must be a whole number"):
        generate(load_checkpoint(checkpoint), [1, 2], bad)


def test_an_endoftext_prompt_generates(checkpoint):
    model = load_checkpoint(checkpoint)
    result = generate(model, tokens.encode(tokens.ENDOFTEXT), 3)
    assert result.token_ids[0] == tokens.ENDOFTEXT_ID and len(result.token_ids) == 4
    assert result.token_ids == greedy_reference(model, [tokens.ENDOFTEXT_ID], 3)


def test_one_new_token_is_counted_in_the_singular(checkpoint):
    model = load_checkpoint(checkpoint)  # context 40
    assert clip(model, 50, 1)[2] == ["The prompt has 50 tokens and the model's context is 40: generation continues "
                                     "its last 39, so that the 1 new token fits."]


def test_the_bundled_model_repeats_one_token_after_plain_english_as_docs_kv_cache_md_says():
    """It was trained on repeated random tokens only: docs/kv-cache.md's example prints one id twenty times."""
    prompt = tokens.encode("Once upon a time")
    result = generate(load_checkpoint(str(models.BUNDLED)), prompt, 20)
    assert result.token_ids == prompt + [48047] * 20
    assert tokens.decode([48047]) == " titan"
