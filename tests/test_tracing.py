"""attnviz.tracing on modules written as users write them: traced weights equal an explicit computation."""

import gc
import inspect
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import user_modules as um
from torch import nn

from attnviz import attention, checks, time_limit, tracing, user_code


def explicit_weights(q, k, causal=True, scale=None):
    """softmax(mask(q·kᵀ·scale)) for (b, h, n, d) tensors, written out."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (b, h, n, n)
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


def heads(t, b, n, h):
    return t.view(b, n, h, -1).transpose(1, 2)  # (b, n, h·d) -> (b, h, n, d)


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(2, 7, 32)


def assert_weights(trace, expected):
    expected = expected.detach().numpy()
    assert trace.steps["weights"].shape == expected.shape
    np.testing.assert_allclose(trace.steps["weights"], expected, atol=1e-6)


@pytest.mark.parametrize("flash", [True, False])
def test_nanogpt_attention_sdpa_and_manual(x, flash):
    torch.manual_seed(1)
    module = um.CausalSelfAttention(n_embd=32, n_head=4, block_size=16, flash=flash).eval()
    trace = tracing.trace_module(module, x)
    q, k, v = module.c_attn(x).split(32, dim=2)
    weights = explicit_weights(heads(q, 2, 7, 4), heads(k, 2, 7, 4))
    assert_weights(trace, weights)
    assert trace.config.causal and trace.num_heads == 4
    names = [name for name, _ in trace.shapes]
    assert "split" in names and ("scaled_dot_product_attention" in names) == flash
    np.testing.assert_allclose(trace.output, module(x).detach().numpy(), atol=1e-6)
    context = weights @ heads(v, 2, 7, 4)  # (b, h, n, hd)
    np.testing.assert_allclose(trace.steps["context"], context.detach().numpy(), atol=1e-5)


def test_nn_multihead_attention_matches_its_own_weights(x):
    torch.manual_seed(2)
    module = um.TorchMHA(32, 4).eval()
    trace = tracing.trace_module(module, x)
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1)
    _, own = module.attn(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)  # (b, h, n, n)
    assert_weights(trace, own)
    assert [name for name, _ in trace.shapes].count("multi_head_attention_forward") == 1
    assert trace.config.causal


def test_nn_multihead_attention_without_a_mask_is_not_causal(x):
    module = um.TorchMHA(32, 4, causal=False).eval()
    trace = tracing.trace_module(module, x)
    _, own = module.attn(x, x, x, need_weights=True, average_attn_weights=False)
    assert_weights(trace, own)
    assert not trace.config.causal


class MHAWithMask(nn.Module):
    """nn.MultiheadAttention given the attn_mask ``mask(n)`` (n, n): boolean (True = may not attend) or float."""

    def __init__(self, mask):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.mask = mask

    def forward(self, x):
        out, _ = self.attn(x, x, x, attn_mask=self.mask(x.shape[1]), need_weights=False)
        return out


BOOLEAN_FUTURE = lambda n: torch.ones(n, n, dtype=torch.bool).triu(1)  # noqa: E731
FLOAT_PAST = lambda n: torch.full((n, n), float("-inf")).tril(-1)  # noqa: E731


@pytest.mark.parametrize(("mask", "float_mask"), [
    (BOOLEAN_FUTURE, False), (lambda n: torch.full((n, n), float("-inf")).triu(1), True),
    (lambda n: BOOLEAN_FUTURE(n).float() * -1e4, True)])
def test_nn_multihead_attention_says_whether_its_mask_is_float_as_the_user_gave_it(mask, float_mask):
    """nn.MultiheadAttention turns a boolean attn_mask into −∞ where True before the call attnviz reads: the
    attention still reads it as the boolean mask it was given, and a float one as float."""
    torch.manual_seed(0)
    attention = tracing.record(MHAWithMask(mask).eval(), torch.randn(1, 3, 32)).attentions[0]
    assert attention.float_mask is float_mask
    assert torch.equal(attention.masked_cells()[0, 0], BOOLEAN_FUTURE(3))


def test_an_nn_multihead_attention_float_mask_that_hides_the_past_is_told_about_float_masks():
    """A float mask with −∞ below the diagonal fails mask-convention saying it hides the past, in the words of a float
    mask (checks.FLOAT_MASK), not nn.MultiheadAttention's boolean convention."""
    torch.manual_seed(0)
    attention = tracing.record(MHAWithMask(FLOAT_PAST).eval(), torch.randn(1, 3, 32)).attentions[0]
    check = checks.mask_convention(attention, True)
    assert check == checks.Check("mask-convention", "fail", "the mask hides the past instead of the future (the "
                                 f"triangle below the diagonal, not above it): {checks.FLOAT_MASK}"), check


@pytest.mark.parametrize("float_mask", [False, True])
def test_sdpa_with_a_boolean_or_a_float_mask(x, float_mask):
    torch.manual_seed(3)
    module = um.SDPAWithMask(32, 4, float_mask=float_mask).eval()
    trace = tracing.trace_module(module, x)
    q, k = heads(module.q(x), 2, 7, 4), heads(module.k(x), 2, 7, 4)
    assert_weights(trace, explicit_weights(q, k))
    assert trace.config.causal


@pytest.mark.parametrize("cls", [um.GroupedQueryAttention, um.GQAWithSDPA])
def test_grouped_query_attention(x, cls):
    torch.manual_seed(4)
    module = cls(32, 4, 2).eval()
    trace = tracing.trace_module(module, x)
    q = heads(module.wq(x), 2, 7, 4)
    if cls is um.GroupedQueryAttention:
        k = module.wk(x).view(2, 7, 2, 8).transpose(1, 2)
    else:
        k = module.wkv(x).view(2, 7, 2, 2, 8)[:, :, 0].transpose(1, 2)
    k = k.repeat_interleave(2, dim=1)  # (b, 2, n, d) -> (b, 4, n, d)
    assert_weights(trace, explicit_weights(q, k))
    if cls is um.GroupedQueryAttention:
        assert "repeat_interleave" in [name for name, _ in trace.shapes]


def test_a_forward_returning_a_tuple(x):
    torch.manual_seed(5)
    module = um.ReturnsTuple(32, 16)
    trace = tracing.trace_module(module, x)
    expected = explicit_weights(module.W_query(x)[:, None], module.W_key(x)[:, None])
    assert_weights(trace, expected)
    assert trace.num_heads == 1 and trace.output.shape == (2, 7, 16)


@pytest.mark.parametrize("make", [lambda: um.CausalSelfAttention(n_embd=32, n_head=4, block_size=16, flash=False),
                                  lambda: um.CausalSelfAttention(n_embd=32, n_head=4, block_size=16, flash=True),
                                  lambda: um.TorchMHA(32, 4), lambda: um.GroupedQueryAttention(32, 4, 2)],
                         ids=["manual", "sdpa", "nn.MultiheadAttention", "gqa"])
def test_a_batch_keeps_every_item_each_as_if_run_alone(make):
    torch.manual_seed(6)
    module = make().eval()
    x = torch.randn(4, 7, 32)
    trace = tracing.trace_module(module, x)
    assert trace.steps["weights"].shape == (4, 4, 7, 7) and trace.output.shape == (4, 7, 32)
    for item in range(4):
        alone = tracing.trace_module(module, x[item:item + 1])
        for stage in ("weights", "scaled", "masked", "context"):
            np.testing.assert_allclose(trace.steps[stage][item], alone.steps[stage][0], atol=1e-6, err_msg=stage)
        np.testing.assert_allclose(trace.output[item], alone.output[0], atol=1e-6)
    assert not np.allclose(trace.steps["weights"][0], trace.steps["weights"][1])  # the items really differ


@pytest.mark.parametrize("variant",
                         ["simplified", "self_attention_v1", "self_attention_v2", "causal", "mha_wrapper", "mha"])
def test_the_books_classes_trace_as_their_own_recorder_records(variant):
    from attnviz import variants
    from attnviz.config import AttentionConfig

    torch.manual_seed(123)
    config = AttentionConfig(variant=variant, d_in=8, d_out=8, num_heads=2, context_length=16)
    module = variants.get(variant).build(config).eval()
    x = torch.randn(1, 5, 8)
    recorder = attention.Recorder()
    with torch.no_grad():
        module(x, recorder)
    trace = tracing.trace_module(module, x)
    np.testing.assert_allclose(trace.steps["weights"], recorder.steps["weights"].numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.output, recorder.steps["output"].numpy(), atol=1e-6)
    assert trace.config.causal == getattr(module, "causal", False) or variant == "mha_wrapper"


def test_the_stage_lines_point_into_the_users_file(x):
    module = um.CausalSelfAttention(flash=False).eval()
    trace = tracing.trace_module(module, x)
    run = trace.module_run
    assert run.filename.endswith("user_modules.py") and run.class_name == "CausalSelfAttention"
    source = Path(run.filename).read_text().splitlines()
    assert "softmax" in source[run.stage_lines["weights"] - 1]
    assert "masked_fill" in source[run.stage_lines["masked"] - 1]
    assert "@ v" in source[run.stage_lines["context"] - 1]


def test_text_is_embedded_at_the_modules_width():
    module = um.CausalSelfAttention(n_embd=32, n_head=4, block_size=64).eval()
    trace = tracing.trace_module(module, "Your journey starts with one step")
    assert trace.tokens[:2] == ("Your", "·journey") and trace.steps["weights"].shape == (1, 4, 6, 6)


@pytest.mark.parametrize(("module", "message"), [
    (um.NoSoftmax(), "no attention found"),
    (um.Raises(), "the forward raised RuntimeError"),
    (um.SoftmaxOverFeatures(), r"attention weights must have shape \(\.\.\., n, n\).*: \(\.\.\., 7, 7\) for an "
                               r"input of shape \(2, 7, 32\); the softmax on line \d+ gives \(2, 7, 16\)"),
    (um.DropsTheBatch(), r"the forward returned shape \(1, 7, 16\) for an input of shape \(2, 7, 32\): .*"
                         r"one vector per token, \(2, 7, d_out\)"),
    (um.ReturnsTransposed(), r"the forward returned shape \(2, 16, 7\) for an input of shape \(2, 7, 32\)"),
], ids=["no-softmax", "raises", "softmax-over-features", "drops-the-batch", "returns-transposed"])
def test_bad_modules_get_one_line(x, module, message):
    with pytest.raises(tracing.TraceError, match=message) as caught:
        tracing.trace_module(module, x)
    assert "\n" not in str(caught.value)


NANOGPT_SPLIT_BY_VIEW = """\
import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=32, n_head=4):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, self.n_head, T, C // self.n_head)
        q = q.view(B, self.n_head, T, C // self.n_head)
        v = v.view(B, self.n_head, T, C // self.n_head)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        return (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
"""


def test_an_error_in_the_users_forward_names_its_file_and_line(tmp_path, x):
    """nanoGPT's heads split with view alone, on a slice of the fused projection: torch raises in the user's
    ``k.view(…)``, and the message names the user's file and line before torch's "view size is not compatible …"."""
    path = tmp_path / "nanogpt_attn.py"
    path.write_text(NANOGPT_SPLIT_BY_VIEW)
    module = user_code.build(user_code.load(f"{path}:CausalSelfAttention"))
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(module, x)
    line = NANOGPT_SPLIT_BY_VIEW.splitlines().index("        k = k.view(B, self.n_head, T, C // self.n_head)") + 1
    assert str(caught.value).startswith(f"the forward raised RuntimeError (nanogpt_attn.py, line {line}): view size is "
                                        "not compatible with input tensor's size and stride"), str(caught.value)


def test_a_softmax_that_is_not_n_by_n_is_not_taken_for_the_attention(x):
    torch.manual_seed(7)
    module = um.GatedAttention(32, 16)
    trace = tracing.trace_module(module, x)
    expected = explicit_weights(module.W_query(x)[:, None], module.W_key(x)[:, None], causal=False)
    assert_weights(trace, expected)
    assert trace.notes == ()  # one attention, not "computed 2 attentions; this shows the first"


def test_tracing_leaves_the_module_and_its_output_unchanged(x):
    module = um.CausalSelfAttention(flash=False).eval()
    before = module(x)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    recording = tracing.record(module, x)
    torch.testing.assert_close(recording.output, before.detach())
    assert all(torch.equal(state[k], v) for k, v in module.state_dict().items())


# -------------------------------------------------------------------- what a notebook may pass in

MHA = attention.MultiHeadAttention(16, 16, 32, 0.0, 4)


@pytest.mark.parametrize(("module", "x", "message"), [
    (MHA, torch.randn(1, 0, 16), "at least one item, one token and one feature"),
    (MHA, torch.randn(0, 5, 16), "at least one item, one token and one feature"),
    (MHA, None, "x must be a (batch, n, d_in) tensor or text, got NoneType"),
    (MHA, 5, "x must be a (batch, n, d_in) tensor or text, got int"),
    (MHA, 0.5, "x must be a (batch, n, d_in) tensor or text, got float"),
    (MHA, np.int64(5), "x must be a (batch, n, d_in) tensor or text, got int64"),
    (MHA, torch.ones(1, 5, 16, dtype=torch.long), "x holds int64 values"),
    (MHA, torch.randn(1, 5, 16, dtype=torch.float64), "pass x.to(torch.float32)"),
    ("MHA", torch.randn(1, 5, 16), "module must be a torch.nn.Module, got str"),
    (attention.MultiHeadAttention, torch.randn(1, 5, 16), "build it first"),
    (um.ExitsInForward(16), torch.randn(1, 5, 16), "the forward called sys.exit(1)"),
])
def test_bad_input_raises_a_trace_error_naming_it(module, x, message):
    with pytest.raises(tracing.TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tracing.trace_module(module, x)


def test_a_numpy_array_runs_at_the_modules_dtype():
    x = np.random.default_rng(0).standard_normal((1, 5, 16))  # float64, NumPy's default
    trace = tracing.trace_module(MHA, x)
    expected = tracing.trace_module(MHA, torch.as_tensor(x, dtype=torch.float32))
    assert np.array_equal(trace.steps["weights"], expected.steps["weights"])


def test_a_float64_module_traces_text_and_its_own_dtype():
    module = attention.MultiHeadAttention(16, 16, 32, 0.0, 4).double()
    assert tracing.trace_module(module, "Your journey starts").steps["weights"].shape == (1, 4, 3, 3)
    assert tracing.trace_module(module, torch.randn(2, 5, 16, dtype=torch.float64)).steps["weights"].shape[0] == 2


def test_a_module_without_weights_runs_on_any_floating_dtype():
    """No weights, no dtype to match: the book's simplified attention (3.3) on float64 input runs as it is."""

    class Simplified(nn.Module):
        def forward(self, x):
            scores = x @ x.transpose(1, 2)  # (b, n, n)
            return torch.softmax(scores, dim=-1) @ x  # (b, n, d)

    trace = tracing.trace_module(Simplified(), torch.randn(1, 4, 3, dtype=torch.float64))
    assert trace.steps["weights"].shape == (1, 1, 4, 4)


LONG_TEXT = "word " * 40  # 41 tokens


@pytest.mark.parametrize("run", [tracing.trace_module, checks.check_module], ids=["trace_module", "check_module"])
@pytest.mark.parametrize(("module", "how"), [
    (um.MyMultiHeadAttention(16, 16, 16, 0.0, 4), "its mask buffer is 16 × 16"),
    (um.LearnedPositions(16, 16, 16), "its context_length is 16"),
], ids=["mask-buffer", "context-length-attribute"])
def test_a_text_longer_than_the_modules_context_says_so_in_words(run, module, how):
    """The module's own shape error ("The size of tensor a (41) must match the size of tensor b (16)") named
    neither the text's length nor the module's context."""
    with pytest.raises(tracing.TraceError) as caught:
        run(module.eval(), LONG_TEXT)
    message = str(caught.value)
    assert message.startswith("the input is 41 tokens; the module's context is 16 (" + how + ")"), message
    assert "use a shorter text or build it with a larger context_length" in message
    assert "must match" not in message and "\n" not in message
    assert run(module, "word " * 15) is not None  # 16 tokens fit


def test_a_long_text_on_a_module_that_fails_at_any_length_keeps_its_own_error():
    """The context is named only when the forward runs on that many tokens: a module that raises anyway is not
    told its text is too long."""
    module = um.ViewWithoutContiguous(16, 16, 16, 0.0, 4).eval()  # its .view raises on 16 tokens too
    with pytest.raises(tracing.TraceError, match=r"^the forward raised RuntimeError \(user_modules\.py, line \d+\): "
                                                     r"The size of tensor a") as caught:
        tracing.trace_module(module, LONG_TEXT)
    assert "context" not in str(caught.value)


def test_a_module_keeping_its_width_and_context_under_other_constructor_names_is_traced_and_checked():
    """emb_dim and max_position_embeddings are names constructors give the input width and the context (the ones
    attnviz builds a module with, declarations.SPELLINGS), read as d_in/embed_dim/… and context_length/block_size/…
    are: this module's text is embedded at its width, a check runs without x and fails no rule, and a text longer
    than its table is refused naming both lengths."""
    module = um.FusedPositionTable(emb_dim=24, max_position_embeddings=16).eval()
    trace = tracing.trace_module(module, "Your journey starts with one step")
    assert trace.config.d_in == 24 and trace.steps["weights"].shape == (1, 1, 6, 6)
    results = {check.rule: check.status for check in checks.check_module(module)}
    assert results["causal"] == "pass" and "fail" not in results.values(), results
    for run in (tracing.trace_module, checks.check_module):
        with pytest.raises(tracing.TraceError) as caught:
            run(module, LONG_TEXT)
        assert str(caught.value) == (
            "the input is 41 tokens; the module's context is 16 (its max_position_embeddings is 16): use a shorter "
            "text or build it with a larger max_position_embeddings")


# ---------------------------------------------------------------- a forward that never returns

ENDLESS = r"EndlessLoop\.forward ran for 0\.3 s without returning \(an endless loop\?\)"


@pytest.fixture
def a_third_of_a_second(monkeypatch):
    """The limit of one forward, lowered from a minute so that a test waits a third of a second."""
    monkeypatch.setattr(time_limit, "SECONDS", 0.3)


def test_a_forward_that_never_returns_is_stopped_with_a_message_and_the_thread_runs_on(a_third_of_a_second):
    module = um.EndlessLoop(16, 16, 4, 0.0, 4)  # its context is 4 tokens: 6 are more, yet it is not run again on 4
    with pytest.raises(tracing.EndlessForwardError, match=ENDLESS):
        tracing.trace_module(module, torch.randn(1, 6, 16))
    assert module.calls == 1
    trace = tracing.trace_module(MHA, torch.randn(1, 5, 16))  # the same thread, right after: a correct module runs
    assert trace.steps["weights"].shape == (1, 4, 5, 5)
    time.sleep(0.5)  # past the limit once more: nothing of the stop is left to land here
    assert sum(range(100_000)) == 4_999_950_000


def _live_tensor_bytes() -> int:
    return sum(o.nbytes for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_an_endless_loop_is_stopped_before_its_recorded_tensors_fill_the_memory(monkeypatch):
    """Recording keeps every output alive: a loop on 1,024 tokens would hold gigabytes a second, so the recorder stops
    the forward when its outputs pass RECORDED_BYTES, long before the time limit, and lets go of them at once — not
    when Python's garbage collector next runs (the recorded graph links its nodes both ways)."""
    monkeypatch.setattr(tracing, "RECORDED_BYTES", 64 * 2**20)  # 64 MiB: a (1, 64, 768) float32 is 192 KiB
    module, x = um.EndlessLoop(768, 768, 64, 0.0, 12), torch.randn(1, 64, 768)  # its weights: 9 MiB
    started = time.perf_counter()
    before = _live_tensor_bytes()
    gc.disable()  # what is freed is freed by the error path itself
    try:
        stopped = r"^EndlessLoop\.forward made [\d,]+ tensor calls whose outputs hold more than 0\.0625 GiB"
        with pytest.raises(tracing.EndlessForwardError, match=stopped) as e:
            tracing.trace_module(module, x)
        assert time.perf_counter() - started < 10  # the time limit is a minute
        assert e.value.__traceback__ is not None  # the error is kept, as a page keeps its message; the tensors are not
        assert _live_tensor_bytes() - before < 2 * 2**20  # of the 64 MiB recorded
    finally:
        gc.enable()
    trace = tracing.trace_module(MHA, torch.randn(1, 5, 16))  # a forward under the limit is recorded whole
    assert trace.steps["weights"].shape == (1, 4, 5, 5)


def test_a_forward_that_finishes_under_the_limit_gets_no_late_exception(monkeypatch):
    monkeypatch.setattr(time_limit, "SECONDS", 0.8)
    # a forward well under the limit (a margin for a busy machine), then Python code past the limit's end
    started = time.perf_counter()
    trace = tracing.trace_module(um.BusyFor(16, 16, 16, 0.0, 4, seconds=0.1), torch.randn(1, 5, 16))
    assert trace.steps["weights"].shape == (1, 4, 5, 5)
    while time.perf_counter() - started < 0.8 + 0.3:  # Python code after the limit has passed: no exception lands
        pass
    time.sleep(0.2)


def test_a_blocking_c_call_is_stopped_when_it_returns(a_third_of_a_second):
    """What run_forward's docstring says: the stop lands between bytecodes, so a ``time.sleep`` runs to its end."""
    started = time.perf_counter()
    with pytest.raises(tracing.EndlessForwardError, match=r"SleepsForever\.forward ran for 0\.3 s"):
        tracing.trace_module(um.SleepsForever(16, 16, 16, 0.0, 4, seconds=0.6), torch.randn(1, 5, 16))
    assert time.perf_counter() - started >= 0.6


def test_a_forward_that_catches_exception_is_still_stopped(a_third_of_a_second):
    class Retries(um.MyMultiHeadAttention):
        def forward(self, x):
            while True:
                try:
                    return super().forward(x.view(-1, 7))  # a shape bug, retried for ever
                except Exception:  # noqa: BLE001, S112  (a learner's retry)
                    continue

    with pytest.raises(tracing.EndlessForwardError, match=r"Retries\.forward ran for 0\.3 s"):
        tracing.trace_module(Retries(16, 16, 16, 0.0, 4), torch.randn(1, 5, 16))


def test_a_stop_the_forward_catches_or_that_lands_in_a_del_is_raised_again(a_third_of_a_second, monkeypatch):
    """A learner's bare ``except`` around the loop catches the first stop; a ``__del__`` that the loop's thread runs
    drops one (Python hands it to ``sys.unraisablehook``): it is raised again, and nothing is printed."""
    class Slow:
        def __del__(self):
            started = time.perf_counter()
            while time.perf_counter() - started < 0.3:
                pass

    class CatchesEverything(um.MyMultiHeadAttention):
        def forward(self, x):
            try:
                while True:
                    x = x + 0
            except:  # noqa: E722
                pass
            Slow()  # dies at once: its __del__ runs 0.3 s, and the next stops land in it
            while True:
                x = x + 0

    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    with pytest.raises(tracing.EndlessForwardError, match=r"CatchesEverything\.forward ran for 0\.3 s"):
        tracing.trace_module(CatchesEverything(16, 16, 16, 0.0, 4), torch.randn(1, 5, 16))
    assert unraisable == []


def test_a_forwards_own_exception_and_sys_exit_are_still_trace_errors(a_third_of_a_second):
    with pytest.raises(tracing.TraceError, match="the forward raised RuntimeError") as raised:
        tracing.trace_module(um.Raises(), torch.randn(1, 5, 32))
    assert not isinstance(raised.value, tracing.EndlessForwardError)
    with pytest.raises(tracing.TraceError, match=r"the forward called sys\.exit\(1\)"):
        tracing.trace_module(um.ExitsInForward(16), torch.randn(1, 5, 16))


# ---------------------------------------------------------------- what api.md promises of trace_module's errors

@pytest.mark.parametrize("text", ["", "   \n"])
def test_an_empty_text_is_a_trace_error_as_api_md_says_and_still_an_empty_text_error(text):
    from attnviz.config import EmptyTextError

    with pytest.raises(tracing.TraceError, match=r"^x is empty text") as caught:
        tracing.trace_module(MHA, text)
    assert isinstance(caught.value, EmptyTextError)  # what attnviz.run raises for it, caught by the same except
    with pytest.raises(tracing.TraceError, match=r"^x is empty text"):
        checks.check_module(MHA, text)


def test_an_empty_tensor_is_the_same_error_as_an_empty_text():
    from attnviz.config import EmptyTextError

    with pytest.raises(EmptyTextError, match="at least one item, one token and one feature"):
        tracing.trace_module(MHA, torch.randn(1, 0, 16))


@pytest.mark.parametrize(("module", "parameter"), [
    (um.CausalSelfAttention(32, 4, block_size=16, flash=False), "block_size"),  # nanoGPT
    (um.MyMultiHeadAttention(32, 32, 16, 0.0, 4), "context_length"),  # the book's
])
def test_a_too_long_text_names_the_modules_own_context_parameter(module, parameter):
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(module.eval(), LONG_TEXT)
    assert str(caught.value).endswith(f"use a shorter text or build it with a larger {parameter}"), caught.value


@pytest.mark.parametrize("run", [tracing.trace_module, checks.check_module], ids=["trace_module", "check_module"])
@pytest.mark.parametrize(("module", "layer"), [
    (um.CausalSelfAttention(n_embd=64, n_head=4, block_size=16, flash=False), "c_attn"),
    (um.OutProjFirst(hidden_size=64), "q_proj"),  # not o_proj, made first, which takes 128
], ids=["nanoGPT", "o_proj-made-first"])
def test_an_input_of_another_width_says_both_widths(run, module, layer):
    """An x of another width than the module takes: the message names x's width and the width of the first Linear
    the forward calls (not the first one the module made), before the module's own error ("mat1 and mat2 shapes
    cannot be multiplied …"), in one line."""
    with pytest.raises(tracing.TraceError) as caught:
        run(module.eval(), torch.randn(2, 8, 32))
    message = str(caught.value)
    assert message.startswith(f"x is 32 wide; the first Linear the forward calls ({layer}) takes 64: pass a "
                              "(batch, n, 64) tensor"), message
    assert "mat1 and mat2" in message and "\n" not in message  # the forward's own words stay, after


# ---------------------------------------------------------------- the input width attnviz feeds

WIDTH_TEXT = "Your journey starts with one step"


def test_without_x_the_input_is_as_wide_as_the_first_linear_the_forward_calls():
    """Qwen3's widths with o_proj made first (OutProjFirst): attnviz feeds x as wide as the forward's first Linear,
    q_proj, takes (64), not o_proj's 128 — in trace_module(text) and check_module(module) alike, where no rule
    fails."""
    module = um.OutProjFirst().eval()
    assert tracing.infer_d_in(module) == 64
    trace = tracing.trace_module(module, WIDTH_TEXT)
    assert trace.config.d_in == 64 and trace.steps["weights"].shape[1] == 8
    results = checks.check_module(module)
    assert [c.rule for c in results if c.status == "fail"] == [], results


def test_finding_the_width_leaves_the_random_numbers_and_the_module_as_they_were():
    """The width comes from a forward stopped at its first Linear: no random number drawn, no weight changed."""
    module = um.OutProjFirst().train()
    weights = {name: p.clone() for name, p in module.state_dict().items()}
    state = torch.random.get_rng_state()
    assert tracing.infer_d_in(module) == 64
    assert torch.equal(torch.random.get_rng_state(), state) and module.training
    assert all(torch.equal(weights[name], p) for name, p in module.state_dict().items())


@pytest.mark.parametrize(("run", "fed"), [
    (lambda module: tracing.trace_module(module, WIDTH_TEXT), "(1, 6, 128)"),
    (checks.check_module, "(2, 8, 128)"),
], ids=["trace_module", "check_module"])
def test_a_width_attnviz_chose_that_the_forward_refuses_says_which_and_where_from(run, fed):
    """EinsumProjections projects with einsum and keeps its only nn.Linear for the output (128 wide in): attnviz can
    only guess, and after the forward's einsum error the message says the width it fed and where that width comes
    from (W_O, the module's first Linear), in one line."""
    module = um.EinsumProjections().eval()
    with pytest.raises(tracing.TraceError) as caught:
        run(module)
    message = str(caught.value)
    assert re.match(r"the forward raised RuntimeError \(user_modules\.py, line \d+\): einsum\(\): subscript d has "
                    "size 64", message), message
    assert message.endswith(f" — x was {fed}: the width of W_O, the module's first Linear; if the module takes "
                            "another width, pass x of that width, a (batch, n, d_in) tensor"), message
    assert "\n" not in message


# ---------------------------------------------------------------- the book's softmax_naive (3.3.1), written in place

@pytest.mark.parametrize("shared_exp", [False, True], ids=["exp-twice", "one-exp"])
def test_the_books_naive_softmax_is_read_as_the_softmax(x, shared_exp):
    module = um.NaiveSoftmax(32, 32, 4, shared_exp=shared_exp).eval()
    trace = tracing.trace_module(module, x)
    b, n = x.shape[:2]
    q, k, v = module.qkv(x).view(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4).detach()  # (b, h, n, hd) each
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
    scaled = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(future, -torch.inf)  # (b, h, n, n)
    expected = torch.softmax(scaled, dim=-1)  # (b, h, n, n)
    np.testing.assert_allclose(trace.steps["weights"], expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(trace.steps["masked"], scaled.numpy(), atol=1e-6)
    assert trace.module_run is not None
    results = {c.rule: c.status for c in checks.check_module(module, x)}
    assert results["rows-sum-to-one"] == results["causal"] == results["scaling"] == "pass", results


def test_another_hand_written_softmax_says_what_is_read_and_what_to_use(x):
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(um.StableNaiveSoftmax(32, 32, 4).eval(), x)
    message = str(caught.value)
    assert message.startswith("no attention found: the forward computed no softmax"), message
    assert ("a hand-written softmax is read only as torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True): use "
            "torch.softmax(s, dim=-1)") in message


def test_a_dict_returned_is_read_by_its_first_tensor_value():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32)  # (b, n, d_in)
    module = um.ReturnsDict().eval()
    recording = tracing.record(module, x)
    assert torch.equal(recording.output, module(x)["hidden_states"])
    assert {check.status for check in checks.check_module(module, x)} <= {"pass", "skip"}


def test_weights_returned_before_the_output_are_refused_naming_where_the_output_is():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 32)  # (b, n, d_in): n = 5, d_out = 16
    with pytest.raises(tracing.TraceError, match=r"the forward returned shape \(2, 1, 5, 5\)") as caught:
        tracing.record(um.ReturnsWeightsFirst().eval(), x)
    assert "item 1 of the tuple it returned has shape (2, 5, 16)" in str(caught.value)


def test_a_classs_source_is_read_once_and_is_the_class_that_ran(monkeypatch):
    """Python finds a class's lines by parsing the whole file that defines it, long for a long file (a user's, or
    tests/helpers/user_modules.py): the tracer reads them once a class, and gives the same lines every time."""
    reads = []
    original = inspect.getsourcelines
    monkeypatch.setattr(inspect, "getsourcelines", lambda obj: reads.append(obj) or original(obj))

    class Fresh(um.MyMultiHeadAttention):  # a class no trace has read yet
        pass

    first, again = (tracing.trace_module(Fresh().eval(), "Your journey starts") for _ in range(2))
    # the class that ran and the class whose forward holds the stages' lines (code_places), each read once however
    # many texts run; a method's own lines (read from its code's first line, not by parsing the file) once a method
    classes = [read for read in reads if inspect.isclass(read)]
    assert Fresh in classes and set(classes) <= {Fresh, um.MyMultiHeadAttention}
    assert len(reads) == len(set(reads))
    assert first.module_run.source == again.module_run.source == "".join(original(Fresh)[0])
    assert first.module_run.source.lstrip().startswith("class Fresh(um.MyMultiHeadAttention):")
    assert first.module_run.first_line == again.module_run.first_line == original(Fresh)[1]
