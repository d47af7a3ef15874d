"""Checks any attention module by rule: the Pitfall lab's knowledge turned on the user's own code.

``check_module(module, x)`` traces the module (:mod:`attnviz.tracing`) and runs nine rules, each with a stable
id, a status (``pass``, ``fail``, or ``skip`` when it does not apply) and evidence in a learner's words —
which cell, which value, what it should be:

* ``rows-sum-to-one`` — every row of every map that has a visible key sums to 1, as the weights multiply V (a
  softmax over the wrong dimension normalises columns; ``softmax(s) / √d`` shrinks every row; a softmax in float16
  or bfloat16 rounds them, named so — not SDPA's on float16 or bfloat16 inputs, which runs in float32);
* ``causal`` — changing the tokens from position j on changes no output before j (skipped for 1 token: nothing
  comes after it, and for a module that is not causal: the evidence says who said so — ``causal=False`` given, the
  module's ``causal`` attribute, or no mask hiding the future — and ``mask-convention`` fails a module that masks
  anyway); a failure says who said the module is causal when it hides nothing (an ``is_causal`` attribute: the
  flag masks nothing by itself), or, when its weights hide the future, where the leak is: in the weights, in V, or
  after ``weights @ V``;
* ``mask-convention`` — the hidden cells are exactly the future (or the future and the keys W or more behind: a
  sliding window of W, as wide as the module's own ``sliding_window_size`` says — a window the module declares must
  show once the tokens reach a key W behind, and one they never reach is traced again on W + 2 tokens, up to
  ``LONGEST_WINDOW_CHECK``): not inverted, not the past instead of the future, not a shifted diagonal (skipped for 1
  token that hides nothing: there is no future); a fix names the module's own ``tril``/``triu`` call or mask buffer
  when one of them is the mask;
* ``scaling`` — the softmax's input is QKᵀ/√d_head (not unscaled, not ÷√d_out, not ÷d_head), however the module
  applies the scale (to the scores, to q or k before the product or an SDPA call); d_head is the width of QKᵀ (of
  scores that are the sum of two products of one width, that width), or for MLA with W_UK absorbed into the queries
  (scores over the latent, its decoupled rotary scores perhaps added) the per-head width the module declares; a
  scale the module's config declares as its design (:func:`declared_scales`: Gemma's ``query_pre_attn_scalar``,
  DeepSeek's YaRN mscale²) passes, named — and a module that ignores it, dividing by √d_head anyway, fails, naming
  both — and a wrong one the module keeps itself (``self.scaling``) is named;
* ``rotary-placement`` — rotary turns the queries and keys only, by head_dim's frequencies: every score depends
  only on i − j and no value turns by its position (:mod:`attnviz.rotary_rule`);
* ``dropout-placement`` — dropout acts on the weights after the softmax in training mode, not at all in eval mode
  (read from the dropout's own call: a mask after the softmax before it is the other rules' finding); while it acts
  in eval mode, a failure of a rule that compares forwards (``COMPARES_OUTPUTS``) is a skip that says so;
* ``batch-independence`` — one item's output does not move when another item of the batch changes (a failure names
  an ``nn.MultiheadAttention`` built without ``batch_first=True`` when setting it for one forward stops the mixing:
  with as many items as tokens no shape shows it);
* ``matches-reference`` — the heads' concatenated context equals softmax(mask(QKᵀ/√d_head))·V computed from
  the module's own recorded Q, K, V (float32, ≤ 1e-5; Q, K and V the module gave in float16 or bfloat16 — SDPA on
  ``q.bfloat16()`` — to that dtype's eps × the largest |V|, said so) — K and V as the module used them (after a
  grouped-query repeat, after rotary), masked as ``mask-convention`` found (causal, or a sliding window), scaled by
  the config's design where ``scaling`` passes one (a difference the module's own scale alone explains is named so,
  not as another cause) — and no two query heads share keys (equal K) but not values while two share values but not
  keys (K repeated with ``repeat_interleave`` and V with ``.repeat``, or the reverse: it names a query head and the
  K/V heads it reads its keys and its values from).  The
  concatenation is what the module feeds a Linear, or returns, when it computed that from its ``weights @ V`` alone;
  else (a residual ``x + context``, V projected after the softmax) the rule compares the recorded ``weights @ V``;
* ``kv-cache`` — for a forward that takes ``use_cache``: two different sequences, each after the module's own
  ``reset_cache()``/``reset_kv_cache()``, fed as a prefill of several tokens and then token by token, the last two in
  one forward (a chunk after a non-empty cache: skipped, said in the pass, for a forward that raises on it or takes a
  model's ``attention_mask``), give the uncached outputs (≤ 1e-5).  A cache the caller holds — a ``past_key_values``
  (``past_key_value``, ``layer_past``, ``past_kv``, ``cache``) argument, returned beside the output, and no reset — is
  checked the same way, each forward given the cache the one before returned; a forward that returns none is given a
  Hugging Face ``DynamicCache`` (transformers imported only then) that it fills in place, the same object every step
  (skipped when the module is not causal, or keeps no cache either way).  A step that differs is recorded again beside
  the whole sequence's forward, and the failure names what the evidence shows: the module's position counter (one that
  never moves, counts forwards, or counts each token twice), how many tokens its cache holds (for a declared window W:
  fewer than the W − 1 a step needs beside its own, or a step that sees more than W keys — a rolling cache one token
  too long), keys read from slots no token was written to, a reset that leaves the cache the last sequence filled,
  where the step's mask puts the new tokens (SDPA's ``is_causal`` over the cache: aligned to the top-left), which of
  its queries, keys or values differ — for a rotary module, a query or cached key of the right length turned by
  another angle (rotated at the wrong position); keys or values that are the whole sequence's K/V heads in
  ``.repeat``'s order instead of ``repeat_interleave``'s, or the reverse; a cached output of NaN or of another shape
  is named as such.  Right outputs with a position counter past the tokens fed fail too (a reset that keeps it: named
  so), saying why they agree — a later row of the causal mask, rotary scores that depend only on i − j.  A pass says
  what the cache holds after the sequence (tokens × elements per token, counted along the dimension that grows by one
  from the first token to the second) — a cache the module resets itself found by what it holds, not by its name (the
  tensors it keeps, inside a tuple, list or dict too, that hold the tokens: that grow from the first token to the
  second, whether the reset empties them or not, or that the reset empties or replaces and that hold what a token
  brought — not a mask, rotary tables or a step counter), a cache the caller holds as the forward returns it after the
  last token — and fails, its outputs right, only on evidence of the waste its declared variant exists to save: a
  window cache holding more than W tokens (not the ``DynamicCache`` attnviz hands a layer, which keeps every token by
  its own choice: said in the pass), K/V tensors of ``num_heads`` heads where ``num_kv_groups`` K/V heads are
  declared, full K and V (d_out per token each) where a ``latent_dim`` is (sizes the module keeps under other names:
  those it was built with, ``check_module``'s ``sizes``, and the heads and head_dim its trace measured).

An uncached forward that writes to a cache the module keeps (a forward that ignores ``use_cache=False``, or takes no
``use_cache`` and caches on every call: :func:`_uncached_appends`) — one that grows, or one allocated once at its full
size whose buffers are written in place and whose pointer moves — fails ``kv-cache`` in those words; the rules that run
the module again (``RUN_AGAIN``) skip, as each of their forwards would attend to the ones before, and the rules that
read the traced forward stand.

Every rule but ``dropout-placement`` runs the module in eval mode; the module's own mode is restored after.
A forward that raises, or computes no attention, raises ``tracing.TraceError`` with one line.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from attnviz import time_limit, tracing, user_code
from attnviz.rotary_rule import _rotary, _rotary_tokens, rotary_placement
from attnviz.rule_base import Check, _per_query_head
from attnviz.tokens import counted
from attnviz.trace import ScoreWidth
from attnviz.tracing import HEAD_DIM_NAMES, DeclaredScale, declared_scales, score_width
from attnviz.user_code import declared_size
from attnviz.words import amount, plural

RULES = ("rows-sum-to-one", "causal", "mask-convention", "scaling", "rotary-placement", "dropout-placement",
         "batch-independence", "matches-reference", "kv-cache")
TOLERANCE = 1e-5
ROW_SUM_TOLERANCE = 1e-4  # a row of float32 weights sums to 1 within this: each of its n terms rounds
SLOW_CHECK_SECONDS = 5.0  # a check expected to take longer says so early (the CLI on stderr, the app in its status)


@dataclass(frozen=True)
class Progress:
    """How far a running check is.  ``check_module(..., progress=callback)`` calls ``callback(Progress)`` before
    every forward of the module and when each rule is done (then ``check`` holds its verdict); an exception the
    callback raises stops the check there, the rules reported so far standing."""

    rule: str | None  # the rule running or just done; None during the traced forward every rule reads
    rules_done: int  # rules finished so far
    rules_total: int  # rules this check runs
    forwards: int  # the module's forwards finished so far (the traced one included)
    forwards_planned: int  # a passing check's forwards (a failure's diagnosis may add a few: _diagnosis_forwards)
    seconds: float  # since the check started
    check: Check | None = None  # the rule's verdict, when it is done

    @property
    def seconds_left(self) -> float | None:
        """Roughly: the planned forwards still to run at the pace so far (None before the first forward ends)."""
        if self.forwards == 0:
            return None
        return (self.forwards_planned - self.forwards) * self.seconds / self.forwards

    def slow_notice(self, forward: str = "one forward", *, threshold: float | None = None,
                    tenths_below: float = 0.0) -> str | None:
        """Once the pace is known, when the whole check will take ``threshold`` seconds or more (default
        ``SLOW_CHECK_SECONDS``): "<forward> takes 1.1 s and the rules run up to 11 forwards: about 12 s"; else None.
        ``tenths_below``: see :func:`duration`."""
        left = self.seconds_left
        if left is None or self.seconds + left < (SLOW_CHECK_SECONDS if threshold is None else threshold):
            return None
        return (f"{forward} takes {self.seconds / self.forwards:.2g} s and the rules run up to "
                f"{self.forwards_planned} forwards: about {duration(self.seconds + left, tenths_below=tenths_below)}")


def duration(seconds: float, *, tenths_below: float = 0.0) -> str:
    """``seconds`` as a person says it: "3 s", "2 min"; with tenths below ``tenths_below`` seconds ("4.2 s")."""
    if seconds < tenths_below:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def default_input(module: nn.Module, n: int = 8, batch: int = 2, seed: int = 0, *,
                  d_in: int | None = None) -> torch.Tensor:
    """A seeded (batch, n, d_in) input: ``d_in`` wide (``attnviz check``'s ``--d-in``, or the width the class was
    built with), else at the module's input width (:func:`attnviz.tracing.infer_d_in`); a module with weights whose
    width attnviz cannot tell is a TraceError."""
    if d_in is None:
        d_in = tracing.infer_d_in(module)
    if d_in is None:
        if any(True for _ in module.parameters()):
            raise tracing.TraceError("cannot tell the module's input width: give it a d_in attribute or pass x")
        d_in = 16  # no weights: any width works
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch, n, d_in, generator=generator)  # (b, n, d_in)
    return inputs.to(tracing.module_dtype(module))  # a float64 module gets its own dtype


RAISE_RULE_ERRORS = "ATTNVIZ_RAISE_RULE_ERRORS"  # "1": a rule whose own code raises raises (tests/conftest.py)


def check_module(module: nn.Module, x: torch.Tensor | str | None = None, *, causal: bool | None = None,
                 rules: Iterable[str] | None = None, progress: Callable[[Progress], None] | None = None,
                 sizes: Mapping[str, int] | None = None) -> list[Check]:
    """The nine rules' verdicts on ``module`` (``x``: (batch, n, d_in), or text embedded as ``trace_module``
    embeds it; None: a seeded (2, 8, d_in)).  A float16 or bfloat16 module is a TraceError: the rules' tolerances are
    float32's.  ``rules``: only these rule ids (in ``RULES`` order); ``progress``: called as the check runs
    (:class:`Progress`); ``sizes``: the sizes the module was built with, by attnviz setting (``num_heads``,
    ``num_kv_groups``, ``latent_dim``, ``d_out`` …: ``attnviz check``'s flags), read where the module keeps them under
    names attnviz does not know.  A rule whose own code raises on what the module gave it is a skip that says so
    (:func:`_not_read`), or, with the environment variable ``ATTNVIZ_RAISE_RULE_ERRORS=1`` (the tests), the error."""
    selected = _selected(rules)
    sizes = _given_sizes(sizes)
    module = tracing.as_module(module)
    dtype = tracing.module_dtype(module)
    if torch.finfo(dtype).eps > torch.finfo(torch.float32).eps:  # float16, bfloat16: eps 1e-3, 8e-3
        raise tracing.TraceError(_half_precision_words(dtype))
    width = None  # the width attnviz chose, said when the traced forward refuses it (tracing.saying_width)
    if x is None:
        width = tracing.input_width(module)
        x = default_input(module, d_in=None if width is None else width.width)
    elif isinstance(x, str):
        width = tracing.input_width(module)
        x = tracing.embed_for(module, x, width=width)[2]  # (1, n, d_in)
    else:
        x = tracing.input_tensor(module, x)
    if x.shape[0] < 2:
        x = torch.cat([x, torch.roll(x, 1, dims=1)])  # batch-independence needs a second item
    was_training = module.training
    meter = _Meter(progress, len(selected), _planned_forwards(module, x, selected, causal is not False))
    hook = module.register_forward_pre_hook(meter.before_forward)
    try:
        module.eval()
        kept = _kept_state(module)
        with tracing.saying_width(x, width):
            recording = tracing.record(module, x)
        attention, _ = tracing.combine(recording.attentions)
        _require_finite_output(recording.output, attention)
        traced = meter.forwards
        appended = _uncached_appends(module, x, recording.output, kept,  # every forward after it would read it
                                     random=_dropout_acts(attention))
        told = meter.forwards - traced  # the forwards that told whether the trace wrote to a cache: 0 to 2
        stated = _stated_causal(module, attention, causal)
        unmasked = _unmasked(module, stated)
        triangles = _triangles(recording, module)
        if causal is None:
            causal = tracing.infer_causal(recording, attention, module)
        meter.planned = _planned_forwards(module, x, selected, causal) + told
        window = sliding_window(attention) if causal else None
        weightless = _weightless(module)
        width = score_width(module, attention)
        declared = declared_scales(module, width.head_dim)
        run = {
            "rows-sum-to-one": lambda: rows_sum_to_one(attention),
            "causal": lambda: causal_rule(module, x, recording.output, causal, stated, attention=attention,
                                          unmasked=unmasked),
            "mask-convention": lambda: mask_convention(attention, causal, declared_window(module), stated,
                                                       unmasked=unmasked, triangles=triangles,
                                                       longer=functools.partial(_traced_on, module, x)),
            "scaling": lambda: scaling(attention, weightless=weightless, width=width, declared=declared),
            "rotary-placement": lambda: rotary_placement(module, x),
            "dropout-placement": lambda: _in_mode_handed_over(module, was_training,
                                                              lambda: dropout_placement(module, x, attention)),
            "batch-independence": lambda: batch_independence(module, x, recording.output),
            "matches-reference": lambda: matches_reference(recording, attention, causal, scaled=not weightless,
                                                           window=window, stated=stated, width=width,
                                                           declared=declared),
            "kv-cache": lambda: kv_cache(module, x, causal, sizes=_sizes(sizes, attention)),
        }
        if appended is not None:  # the traced forward came first, on what the module held: only its verdicts stand
            run.update({rule: functools.partial(Check, rule, "skip", APPENDED_SKIP) for rule in RUN_AGAIN})
            run["mask-convention"] = lambda: mask_convention(attention, causal, declared_window(module), stated,
                                                             unmasked=unmasked, triangles=triangles)
            run["kv-cache"] = lambda: Check("kv-cache", "fail", appended)
        random = _dropout_acts(attention)  # in eval mode: two forwards of the same input differ
        checks = []
        for rule in selected:
            meter.rule = rule
            try:
                check = run[rule]()
                if random and check.status == "fail" and rule in COMPARES_OUTPUTS:
                    # dropout-placement fails for it; checked without that rule, the failure names the dropout
                    check = (Check(rule, "skip", DROPOUT_IN_EVAL) if "dropout-placement" in selected
                             else Check(rule, "fail", DROPOUT_FAILS))
                checks.append(check)
            except tracing.TraceError as error:  # a forward of the rule's own raised: the rules before it stand
                raise tracing.TraceError(f"{error} (while checking {rule})") from error
            except Exception as error:  # the rule's own code failed on what the module gave it: its verdict says so
                if os.environ.get(RAISE_RULE_ERRORS) == "1":  # the tests: attnviz's own bug, never hidden as a skip
                    raise
                checks.append(_not_read(rule, error))
            meter.done(checks[-1])
    finally:
        hook.remove()
        module.train(was_training)
    return checks


def _half_precision_words(dtype: torch.dtype) -> str:
    """Why a float16 or bfloat16 module is not checked, and what the float32 copy it can be checked as does not show:
    the rounding of every weight, and in float16 a score past its largest number."""
    name, finfo = str(dtype).removeprefix("torch."), torch.finfo(dtype)
    overflow = (f", and a score above {finfo.max:,.0f} overflows to ∞, which makes its row of weights NaN"
                if finfo.max < 1e6 else "")
    return (f"the module's weights are {name}, which holds about {-math.log10(finfo.eps):.0f} digits: the rules "
            f"compare outputs to {TOLERANCE:g} and would fail a correct module. Check a float32 copy, "
            f"copy.deepcopy(module).float(): it checks the computation, not its precision — in {name} every attention "
            f"weight is rounded to about {-math.log10(finfo.eps):.0f} digits (a row sums to 1 only within about "
            f"{finfo.eps:.0g}){overflow}")


COMPARES_OUTPUTS = ("causal", "batch-independence", "matches-reference", "kv-cache")  # rules that compare forwards
DROPOUT_IN_EVAL = ("not checked: dropout acts in eval mode (see dropout-placement), so two forwards of the same input "
                   "differ whatever the module does — fix the dropout, then check again")
DROPOUT_FAILS = ("dropout acts in eval mode, so two forwards of the same input differ whatever else the module does: "
                 "pass training=self.training to F.dropout (SDPA: dropout_p=self.dropout if self.training else 0.0), "
                 "then check again")


RUN_AGAIN = ("causal", "rotary-placement", "dropout-placement", "batch-independence")  # rules that run it again
APPENDED_SKIP = ("not checked: the module's uncached forward adds to its cache (see kv-cache), so every forward after "
                 "the first attends to the tokens of the ones before — fix that, then check again")


@dataclass(frozen=True)
class _KeptState:
    """What a module keeps, as an uncached forward may change it, without a copy of its cache: every tensor it keeps
    (:func:`_kept_tensors`) with its version counter, which an in-place write moves (a copy of an inference tensor,
    which keeps none), the paths of those that are buffers, and the numbers its modules hold as attributes (a
    position counter: ``ptr``, ``trf_blocks.0.att.ptr_cur``)."""

    tensors: dict[str, tuple[torch.Tensor, int | None]]
    buffers: frozenset[str]
    numbers: dict[str, int | float | bool]


def _kept_state(module: nn.Module) -> _KeptState:
    """The module's :class:`_KeptState` now."""
    tensors = {}
    for path, tensor in _kept_tensors(module).items():
        version = _version(tensor)
        tensors[path] = (tensor, version) if version is not None else (tensor.detach().clone(), None)
    numbers = {f"{prefix}.{name}" if prefix else name: value for prefix, submodule in module.named_modules()
               for name, value in vars(submodule).items()
               if name not in MODULE_INTERNALS and type(value) in (int, float, bool)}
    return _KeptState(tensors, frozenset(name for name, _ in module.named_buffers()), numbers)


def _tensor_change(before: tuple[torch.Tensor, int | None] | None,
                   after: tuple[torch.Tensor, int | None] | None) -> str | None:
    """How a kept tensor changed between two :class:`_KeptState` entries (None: it did not): "appeared as (2, 4, 16,
    8)", "was removed", "changed in place" (the same tensor, its version counter moved) or "was replaced by (…)"
    (another tensor of other values: one of equal values, rebuilt by every forward, is no change)."""
    if before is None and after is None:
        return None
    if before is None:
        return f"appeared as {_shape_words(after[0].shape)}"
    if after is None:
        return "was removed"
    if before[0] is after[0]:
        return "changed in place" if before[1] is not None and before[1] != after[1] else None
    return None if _unchanged(before[0], after[0]) else f"was replaced by {_shape_words(after[0].shape)}"


def _state_changes(before: _KeptState, after: _KeptState) -> tuple[list[str], list[str]]:
    """The paths of the tensors, and of the numbers, that changed from ``before`` to ``after``."""
    tensors = [path for path in dict.fromkeys([*before.tensors, *after.tensors])
               if _tensor_change(before.tensors.get(path), after.tensors.get(path)) is not None]
    numbers = [path for path in dict.fromkeys([*before.numbers, *after.numbers])
               if before.numbers.get(path, MISSING) != after.numbers.get(path, MISSING)]
    return tensors, numbers


MISSING = object()  # a number an attribute did not hold yet


def _seeded_output(module: nn.Module, x: torch.Tensor, what: str) -> tuple[torch.Tensor | None, str | None]:
    """(the module's uncached output of ``x``, None) or (None, the error's line, beginning with ``what``, when the
    forward raises), every random number it draws (a dropout) drawn from one seed, so that two such forwards that
    differ differ by what the module kept; the caller's random state is left as it was."""
    devices = [x.device.index or 0] if x.device.type != "cpu" else []
    with torch.random.fork_rng(devices=devices, device_type=x.device.type if devices else "cuda"), torch.no_grad():
        torch.manual_seed(0)
        try:
            return tracing.first_tensor(tracing.run_forward(module, x, what=what)).detach(), None  # (b, n, d_out)
        except tracing.TraceError as error:
            return None, time_limit.one_line(error)


def _differs(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """How output ``b`` differs from ``a`` (None: it does not, within ``TOLERANCE``)."""
    if a.shape != b.shape:
        return f"is {tuple(b.shape)}, not {tuple(a.shape)}"
    worst = (b.float() - a.float()).abs().max().item()
    return None if worst <= TOLERANCE else f"differs by {worst:.3g}"


def _uncached_appends(module: nn.Module, x: torch.Tensor, output: torch.Tensor, before: _KeptState,
                      random: bool = False) -> str | None:
    """kv-cache's words for a module whose uncached forward — ``use_cache=False``, or a forward that takes no
    ``use_cache`` — writes to a cache it keeps (None: it does not).  The traced forward of ``x`` (its ``output``)
    changed a tensor the module keeps ``before`` it (:class:`_KeptState`: new, grown, replaced by other values or
    written in place — a number that moves alone, a call counter, holds no keys), the same forward again changed a
    tensor again, and that second forward raised (then what the first changed is named) or gave another output.
    What changes only in the first forward (rotary tables built on the first call) and what changes every time but
    is never read back (a log, the last weights kept for plotting: the outputs agree) is no finding; ``random``
    (dropout acts in eval mode): two more forwards with the same random numbers must differ too.  Only when the first
    forward changed a tensor does this run the second: every rule after it would attend to what the ones before
    wrote, until a shape no longer fits.

    A cache that grows is named by its shapes (:func:`_appended_words`); one allocated once at its full size (the
    book's optimized cache, Llama's) by what changed in it and the numbers that moved (:func:`_written_words`)."""
    first = _kept_state(module)
    written, counted_first = _state_changes(before, first)
    if not written:
        return None  # no tensor changed: a number alone (a call counter) holds no keys
    again, raised = _seeded_output(module, x, "the second one")
    second = _kept_state(module)
    written_again, counted_again = _state_changes(first, second)
    if raised is None:
        what = _differs(output, again)
        if not written_again or what is None:
            return None  # built on the first call, or kept and never read back
        if random and again.shape == output.shape:
            third, raised_third = _seeded_output(module, x, "the third one")
            if raised_third is None and _differs(again, third) is None:
                return None  # the dropout's, not the cache's: the same random numbers give the same output
        what = f"the second one's output {what}"
    else:
        what = raised  # "the second one raised RuntimeError: …"
    grown = [path for path in written_again if path in first.tensors and path in second.tensors
             and second.tensors[path][0].numel() > first.tensors[path][0].numel()]
    takes_use_cache, _ = _cache_parameters(module)
    called = "with use_cache=False" if takes_use_cache else "(it takes no use_cache)"
    if grown:
        return _appended_words(called, takes_use_cache, x, grown, before, first, second, what)
    changed = written_again + counted_again if written_again else written + counted_first
    return _written_words(called, takes_use_cache, x, changed, before, first, second, what)


def _appended_words(called: str, takes_use_cache: bool, x: torch.Tensor, grown: list[str], before: _KeptState,
                    first: _KeptState, second: _KeptState, what: str) -> str:
    """kv-cache's words for an uncached forward that appends to a cache that grows (``grown``: the tensors that grew
    again in the second forward)."""
    def shape(state: _KeptState, path: str) -> torch.Size | None:
        return state.tensors[path][0].shape if path in state.tensors else None

    sizes = ", ".join(f"{path} from {_shape_words(shape(before, path))} to {_shape_words(shape(first, path))}, then "
                      f"{_shape_words(shape(second, path))}" for path in grown)
    fix = ("append to the cache, and read it, only when use_cache is true (if use_cache: self.cache_k = "
           "torch.cat(…)), then check again" if takes_use_cache else
           "take use_cache=False in the forward and append to the cache, and read it, only when it is true, then "
           "check again")
    return (f"the forward {called} appended to the cache: two uncached forwards of the same {counted(x.shape[1])} "
            f"grew {sizes}, and {what} — each uncached forward attends to the tokens of the ones before; {fix}")


def _written_words(called: str, takes_use_cache: bool, x: torch.Tensor, changed: list[str], before: _KeptState,
                   first: _KeptState, second: _KeptState, what: str) -> str:
    """kv-cache's words for an uncached forward that writes into a cache whose shape stays (``changed``: the tensors
    and numbers the second forward changed again, or, when it raised before changing a tensor, those the first
    changed):
    "the buffer cache_k changed in place (its shape (2, 4, 16, 8) kept)", "ptr went from 0 to 8, then 16"."""
    parts, counters = [], []
    for path in changed:
        if path in first.tensors or path in before.tensors:
            steps = [step for step in (_tensor_change(before.tensors.get(path), first.tensors.get(path)),
                                       _tensor_change(first.tensors.get(path), second.tensors.get(path)))
                     if step is not None]
            steps = list(dict.fromkeys(steps))  # written in place by both forwards: said once
            if steps[0] == "changed in place":
                steps[0] += f" (its shape {_shape_words(first.tensors[path][0].shape)} kept)"
            kind = "buffer" if path in first.buffers or path in second.buffers else "attribute"
            parts.append(f"the {kind} {path} {', then '.join(steps)}")
        else:
            counters.append(path)
            values = [state.numbers.get(path, MISSING) for state in (before, first, second)]
            if values[0] == values[1]:
                values = values[1:]
            values = [value for index, value in enumerate(values) if index == 0 or value != values[index - 1]]
            said = ["nothing" if value is MISSING else repr(value) for value in values]
            parts.append(f"{path} went from {said[0]} to {said[1]}" + "".join(f", then {v}" for v in said[2:]))
    changes = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    move = "".join(f", move {name}" for name in counters[:1]) + "".join(f" and {name}" for name in counters[1:])
    fix = (f"write to the cache{move} and read the cache only when use_cache is true (when it is false, attend to the "
           "new keys and values alone), then check again" if takes_use_cache else
           f"take use_cache=False in the forward, and write to the cache{move} and read the cache only when it is "
           "true, then check again")
    return (f"the forward {called} wrote to the cache: in two uncached forwards of the same {counted(x.shape[1])} "
            f"{changes}, and {what} — each uncached forward attends to what the ones before left in the cache; {fix}")


def _shape_words(shape: torch.Size | None) -> str:
    """ "(2, 2, 8, 8)", or "nothing" for a tensor the module did not keep."""
    return "nothing" if shape is None else f"({', '.join(map(str, shape))})"


def _traced_on(module: nn.Module, x: torch.Tensor, n: int) -> tracing.Attention | None:
    """The module's attention on a seeded (1, n, d_in) input as wide as ``x``; None when n is past the context the
    module says it has, or the forward raises on it."""
    context = tracing.module_context(module)
    if context is not None and n > context[0]:
        return None
    generator = torch.Generator().manual_seed(3)
    longer = torch.randn(1, n, x.shape[-1], generator=generator).to(device=x.device, dtype=x.dtype)  # (1, n, d_in)
    try:
        return tracing.combine(tracing.record(module, longer).attentions)[0]
    except tracing.TraceError:
        return None


def _not_read(rule: str, error: Exception) -> Check:
    """The verdict of a rule whose own code raised ``error`` on the module's recorded tensors or outputs (a layout
    it does not read): a skip in one line naming the error, so the other rules stand and nothing escapes."""
    return Check(rule, "skip", f"could not be checked: the rule failed on what the module gave it "
                               f"({type(error).__name__}: {time_limit.one_line(error)}) — the module may still be "
                               "right; please report it with the module's code")


def _selected(rules: Iterable[str] | None) -> list[str]:
    """The rule ids to run, in RULES order; ValueError naming an unknown one."""
    if rules is None:
        return list(RULES)
    wanted = [rules] if isinstance(rules, str) else list(rules)
    unknown = [rule for rule in wanted if rule not in RULES]
    if unknown:
        raise ValueError(f"no rule {unknown[0]!r}: the rules are {', '.join(RULES)}")
    return [rule for rule in RULES if rule in wanted]


SIZES_READ = ("num_heads", "num_kv_groups", "head_dim", "d_out", "latent_dim", "sliding_window_size")  # kv-cache's


def _given_sizes(sizes: Mapping[str, int] | None) -> dict[str, int]:
    """``check_module``'s ``sizes`` by attnviz setting: a constructor's spelling of one (``n_kv_heads``,
    ``num_key_value_heads`` → ``num_kv_groups``: :data:`attnviz.user_code.SPELLINGS`) read as the setting, and the
    sizes ``attnviz check`` passes that no rule reads (``d_in``, ``context_length`` …) taken; ValueError naming a name
    that is neither, and the sizes the rules read (:data:`SIZES_READ`), or a size read that is not a positive whole
    number."""
    by_name = {spelling: setting for setting, spellings in user_code.SPELLINGS.items() for spelling in spellings}
    by_name.update({setting: setting for setting in [*user_code.SPELLINGS, "head_dim"]})
    read = ", ".join(f"{setting} ({', '.join(user_code.SPELLINGS[setting][1:3])} …)"
                     if len(user_code.SPELLINGS.get(setting, ())) > 1 else setting for setting in SIZES_READ)
    given = {}
    for name, value in (sizes or {}).items():
        setting = by_name.get(name)
        if setting is None:
            raise ValueError(f"no size {name!r}: the sizes the kv-cache rule reads are {read}")
        if setting in SIZES_READ and not user_code.is_size(value):
            raise ValueError(f"sizes[{name!r}] is {value!r}: a size is a positive whole number")
        if given.get(setting, value) != value:
            raise ValueError(f"sizes give {setting} twice, {given[setting]!r} and {value!r} ({name!r})")
        given[setting] = value
    return given


def _planned_forwards(module: nn.Module, x: torch.Tensor, rules: list[str], causal: bool) -> int:
    """How many forwards of the module a check of ``rules`` on ``x`` runs at most: the traced one, then causal's one
    per position after the first, mask-convention's one on more tokens for a declared window they do not reach,
    rotary-placement's one on one token repeated (for a rotary module), dropout-placement's one in training mode,
    batch-independence's one per item, and kv-cache's two uncached sequences and, per sequence, the prefill and one
    forward per token after it, then the forwards that find the cache and measure a token's size in it (three for a
    cache the module resets, two for a cache the caller holds).
    That is a passing check's count: a failing rule runs fewer of its own, and its diagnosis up to
    :func:`_diagnosis_forwards` more."""
    batch, n = x.shape[:2]
    use_cache, cache_name = _cache_parameters(module)
    takes_cache = use_cache or cache_name is not None
    resets = use_cache and any(callable(getattr(module, name, None)) for name in RESETS)
    measured = 3 if resets else 2 if takes_cache else 0
    window = declared_window(module)
    longer = causal and window is not None and n <= window <= LONGEST_WINDOW_CHECK - 2
    per_rule = {"causal": n - 1 if causal else 0, "mask-convention": int(longer),
                "rotary-placement": int(_rotary(module) and _rotary_tokens(module, x) > 1),
                "dropout-placement": 1, "batch-independence": batch,
                "kv-cache": 2 * (1 + len(kv_steps(n, kv_prefill(n)))) + measured if takes_cache and n > 1 else 0}
    return 1 + sum(per_rule.get(rule, 0) for rule in rules)


def _diagnosis_forwards(module: nn.Module, x: torch.Tensor, rules: list[str]) -> int:
    """How many forwards beyond the plan (:func:`_planned_forwards`, a passing check's) a failure's diagnosis may run
    at most: causal's one recording of the changed input (where the leak is), batch-independence's two with
    ``batch_first=True`` set, and kv-cache's three finding the cache and measuring a token's size in it, one recording
    of the whole sequence, the forwards before the failing step again (at most n − prefill) and the step (the cause).
    A rule that fails skips its later forwards, so a check usually runs fewer."""
    n = x.shape[1]
    use_cache, cache_name = _cache_parameters(module)
    takes_cache = use_cache or cache_name is not None
    per_rule = {"causal": 1, "batch-independence": 2,
                "kv-cache": n - kv_prefill(n) + 5 if takes_cache and n > 1 else 0}
    return sum(per_rule.get(rule, 0) for rule in rules)


class _Meter:
    """Counts the module's forwards (a forward pre-hook) and hands the progress callback a ``Progress``."""

    def __init__(self, callback: Callable[[Progress], None] | None, rules_total: int, planned: int):
        self.callback, self.rules_total, self.planned = callback, rules_total, planned
        self.rule: str | None = None
        self.rules_done = self.forwards = 0
        self.started = time.perf_counter()

    def report(self, check: Check | None = None) -> None:
        if self.callback is not None:
            with time_limit.own_code():  # inside the user's forward (a pre-hook): its stop is not the user's exception
                self.callback(Progress(self.rule, self.rules_done, self.rules_total, self.forwards,
                                       max(self.planned, self.forwards), time.perf_counter() - self.started, check))

    def before_forward(self, module, args) -> None:
        self.report()
        self.forwards += 1

    def done(self, check: Check) -> None:
        self.rules_done += 1
        self.report(check)


def _in_mode_handed_over(module: nn.Module, was_training: bool, rule: Callable[[], Check]) -> Check:
    """``rule()`` with the module in the mode it was handed over in (eval mode again after), and its buffers as
    they were before (a training-mode forward may update running statistics that later rules' outputs read)."""
    buffers = {name: buffer.clone() for name, buffer in module.named_buffers()}
    module.train(was_training)
    try:
        return rule()
    finally:
        module.eval()
        with torch.no_grad():
            for name, buffer in module.named_buffers():
                if name in buffers and buffer.shape == buffers[name].shape:
                    buffer.copy_(buffers[name])


# -------------------------------------------------------------------- the rules

def _where(attention: tracing.Attention, index) -> str:
    item, head, row, col = (int(i) for i in index)
    heads = attention.weights.shape[1]
    place = f"row {row} (query {row}), key {col}"
    return (f"item {item}, " if item else "") + (f"head {head}, " if heads > 1 else "") + place


def sums_to_one(sums: torch.Tensor) -> torch.Tensor:
    """Where a sum of attention weights is 1 within ``ROW_SUM_TOLERANCE`` (NaN is not)."""
    return torch.abs(sums - 1) <= ROW_SUM_TOLERANCE  # same shape as sums


def rows_sum_to_one(attention: tracing.Attention) -> Check:
    rule = "rows-sum-to-one"
    weights = attention.weights.float() * attention.weights_scale  # (b, h, nq, nk): what multiplies V
    if attention.zeroed_after is not None:  # a mask after the softmax zeroed these weights on their way to V
        weights = weights.masked_fill(attention.zeroed_after, 0.0)  # (b, h, nq, nk)
    visible = ~attention.hidden_cells()  # (b, h, nq, nk)
    rows = visible.any(-1)  # (b, h, nq): rows with at least one visible key
    sums = weights.sum(-1)  # (b, h, nq)
    bad = rows & ~sums_to_one(sums)  # (b, h, nq)
    if not bad.any():
        return Check(rule, "pass", f"all {int(rows.sum())} rows with a visible key sum to 1")
    item, head, row = (int(i) for i in bad.nonzero()[0])
    where = (f"item {item}, " if item else "") + (f"head {head}, " if weights.shape[1] > 1 else "")
    value = _sum_words(sums[item, head, row].item())
    hint = (" — the softmax ran over dim=-2 (the queries), so columns sum to 1: use dim=-1 (the keys)"
            if attention.softmax_dim != -1 else "")
    if attention.zeroed_after is not None:
        return Check(rule, "fail", f"{where}row {row} of the weights that multiply V sums to {value}, should be "
                                   f"1{hint} — {MASK_AFTER_SOFTMAX}")
    if not math.isclose(attention.weights_scale, 1.0, rel_tol=1e-6):
        return Check(rule, "fail", f"{where}row {row} of the weights that multiply V sums to {value}, should be "
                                   f"1{hint} — the weights are {_times(attention.weights_scale)} after the softmax: "
                                   "scale the scores before the softmax, not the weights after it")
    low = _low_precision(attention)
    return Check(rule, "fail", f"{where}row {row} sums to {value}, should be 1{hint}" + (f" — {low}" if low else ""))


def _sum_words(value: float) -> str:
    """A row's sum with enough digits to show how far it is from 1: "0.9998", "1.00012" (4 to 9 digits)."""
    for digits in range(4, 10):
        words = f"{value:.{digits}g}"
        if float(words) != 1.0:
            break
    return words


def _low_precision(attention: tracing.Attention) -> str | None:
    """Words for a softmax that ran in float16 or bfloat16 in a module checked in float32 or float64 (its weights hold
    2 or 3 digits: rows sum to 1 and outputs match the reference only to about 1e-3); None otherwise."""
    dtype = attention.weights.dtype
    if not dtype.is_floating_point or torch.finfo(dtype).eps <= torch.finfo(torch.float32).eps:
        return None
    name = str(dtype).removeprefix("torch.")
    return (f"the softmax runs in {name}, which holds about {-math.log10(torch.finfo(dtype).eps):.0f} digits: "
            "upcast it, F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)")


MASK_AFTER_SOFTMAX = ("the mask is applied after the softmax: rows no longer sum to 1 — mask the scores with −∞ "
                      "before the softmax")


def _times(factor: float) -> str:
    """"divided by 4" for 0.25, "multiplied by 3" for 3."""
    return f"divided by {1 / factor:.4g}" if abs(factor) < 1 else f"multiplied by {factor:.4g}"


def causal_given(causal: bool) -> str:
    """How the evidence names ``check_module``'s ``causal`` argument: "causal=False was given"."""
    return f"causal={causal} was given"


def _stated_causal(module: nn.Module, attention: tracing.Attention, causal: bool | None) -> str | None:
    """Who said whether the module is causal, in words, when its hidden cells did not: the caller
    ("causal=False was given": ``check_module``'s argument, which the CLI names as its flag), the module's own
    ``causal`` attribute, or an ``is_causal`` attribute that is True, the module's or a submodule's
    (``tracing.causal_flag``); None when the check reads it off the module's mask (``tracing.infer_causal``)."""
    if causal is not None:
        return causal_given(causal)
    if attention.is_causal:  # the call's own flag: the mask is the call's
        return None
    value = getattr(module, "causal", None)
    if isinstance(value, bool):  # what infer_causal reads first, after a call's flag
        return f"the module's causal attribute is {value}"
    flag = tracing.causal_flag(module)
    return None if flag is None else _flag_words(flag)


def _flag_words(flag: tuple[str, nn.Module]) -> str:
    """An ``is_causal`` attribute that is True (``tracing.causal_flag``), as the evidence names it."""
    name, flagged = flag
    return ("the module's is_causal attribute is True" if not name else
            f"its {name} ({type(flagged).__name__}) has is_causal = True")


def _unmasked(module: nn.Module, stated: str | None) -> str | None:
    """Why a module said to be causal may hide no cell, when an ``is_causal`` attribute said so: the flag masks
    nothing by itself — a Hugging Face layer's eager attention masks only through the attention_mask its model
    builds; None for any other statement (then the rules' own words say it)."""
    flag = tracing.causal_flag(module)
    if flag is None or stated != _flag_words(flag):
        return None
    flagged = flag[1]
    config = getattr(flagged, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if type(flagged).__module__.startswith("transformers."):
        layer = type(flagged).__name__
        if implementation == "eager":
            return (f"{layer}'s eager attention masks only through attention_mask, which its model builds: pass it "
                    "the causal mask, or build the layer with attn_implementation=\"sdpa\" (it reads is_causal)")
        return f"{layer} masks through the attention_mask its model builds: pass it the causal mask"
    return "the flag masks nothing by itself; the forward must hide the future (masked_fill, or SDPA's is_causal=True)"


def causal_rule(module: nn.Module, x: torch.Tensor, output: torch.Tensor, causal: bool,
                stated: str | None = None, *, attention: tracing.Attention | None = None,
                unmasked: str | None = None) -> Check:
    """``stated``: who said whether the module is causal (:func:`_stated_causal`); None: its mask says.
    ``attention``: the traced attention, whose hidden cells say where a leak is (:func:`_leak_cause`);
    ``unmasked``: why a module said to be causal may hide nothing (:func:`_unmasked`)."""
    rule = "causal"
    n = x.shape[1]
    if n == 1:
        return Check(rule, "skip", "1 token: nothing after it to change — check 2 or more tokens")
    if not causal:
        return Check(rule, "skip", f"not checked: {stated}" if stated else
                     "the module is not causal (no mask hides the future)")
    generator = torch.Generator().manual_seed(1)
    for j in range(1, n):
        changed = x.clone()  # (b, n, d_in)
        changed[:, j:] = torch.randn(changed[:, j:].shape, generator=generator).to(x.dtype)
        with torch.no_grad():
            moved = (_output(module, changed)[:, :j] - output[:, :j]).abs()  # (b, j, d_out)
        if moved.max() > TOLERANCE:
            position = int(moved.amax(dim=(0, 2)).argmax())
            cause = _leak_cause(module, changed, j, attention, stated, unmasked) if attention is not None else ""
            return Check(rule, "fail", f"changing tokens {j}… changed the output at position {position} by "
                                       f"{moved.max().item():.3g}: position {position} sees the future{cause}")
    js = "j = 1" if n == 2 else f"j = 1 … {n - 1}"
    return Check(rule, "pass", f"changing tokens j… moves no output before j ({js})")


def _leak_cause(module: nn.Module, changed: torch.Tensor, j: int, attention: tracing.Attention,
                stated: str | None, unmasked: str | None) -> str:
    """Where the future leaks in, in words after a dash, when the traced attention tells: no cell hidden although
    the module is said to be causal; or the weights hide every future key, so the module run again on ``changed``
    (tokens j… changed) shows which stage of the queries before j moves first — their weights (a softmax over the
    queries, or Q and K), their context (V), or neither: then the leak comes after ``weights @ V`` (the heads put
    back together without transposing); "" otherwise."""
    hidden = attention.hidden_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk)
    if attention.zeroed_after is not None:
        return (f" — {MASK_AFTER_SOFTMAX} (each weight is divided by a sum over every key, the future's "
                "included)")
    if not hidden.any():
        if stated is None:
            return ""
        return f" — {stated}, yet no mask hides the future" + (f": {unmasked}" if unmasked else "")
    if not hidden[..., future].all():
        return ""  # a future key is visible: mask-convention names it
    try:
        rerun, _ = tracing.combine(tracing.record(module, changed).attentions)
    except tracing.TraceError:
        return ""
    if rerun.weights.shape != attention.weights.shape:
        return ""
    hide = " — the mask hides the future"
    if _moved_before(j, attention.weights, rerun.weights):
        if attention.softmax_dim != -1:
            return (f"{hide}, but the softmax ran over dim=-2 (the queries): each weight is divided by a sum over "
                    "every query, later ones included — use dim=-1 (the keys)")
        return f"{hide}, yet the weights of the queries before position {j} move: their Q or K depend on later tokens"
    if attention.context is None or rerun.context is None or rerun.context.shape != attention.context.shape:
        return ""
    if _moved_before(j, attention.context, rerun.context):
        return (f"{hide} and the weights before position {j} do not move, yet each head's weights @ V there does: "
                "the values of earlier tokens depend on later ones")
    return (f"{hide} and each head's weights @ V before position {j} does not move, so the leak comes after weights "
            "@ V: check how the heads are put back together (transpose(1, 2) before view)")


def _moved_before(j: int, before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether the rows of the queries before ``j`` of (b, h, nq, m) maps moved by more than TOLERANCE (a NaN
    difference — a row with no visible key — counts as none)."""
    return (after[:, :, :j] - before[:, :, :j]).abs().nan_to_num(nan=0.0).max().item() > TOLERANCE


def mask_convention(attention: tracing.Attention, causal: bool, declared: int | None = None,
                    stated: str | None = None, *, unmasked: str | None = None,
                    triangles: tuple[Triangle, ...] | list[Triangle] = (),
                    longer: Callable[[int], tracing.Attention | None] | None = None) -> Check:
    """``declared``: the module's own window (:func:`declared_window`), which the hidden cells must show when the
    tokens reach a key W behind; ``stated``: who said whether the module is causal (:func:`_stated_causal`), None when
    its mask says; ``unmasked``: why a module said to be causal may hide nothing (:func:`_unmasked`); ``triangles``:
    the triangles the module made (:func:`_triangles`), so a fix names the one that is its mask; ``longer(n)``: the
    module's attention traced on n tokens (None when it cannot be), for a declared window too wide for the checked
    tokens (:func:`_window_on_more_tokens`)."""
    rule = "mask-convention"
    hidden = attention.hidden_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk): the cells after each query
    if nk == 1 and not hidden.any():  # a hidden 1 × 1 cell is still a token that hides itself
        return Check(rule, "skip", "1 token: no future to hide, and nothing is hidden — check 2 or more tokens")
    window = sliding_window(attention) if causal else None
    if window is not None and declared not in (None, window):
        return Check(rule, "fail", f"the hidden cells are the future and the keys {window} or more behind (a window "
                                   f"of {window}), but the module's window is {declared}: "
                                   + (_one_key_wide(declared) if window == declared + 1 else
                                      f"query i should see keys i - {declared - 1} … i"))
    if window is not None:
        return Check(rule, "pass", f"sliding window W = {window}: the hidden cells are the future and the keys "
                                   f"{window} or more behind (query i sees keys i - {window - 1} … i)")
    if not causal:
        if not hidden.any():
            return Check(rule, "skip", f"{stated}, and the module hides no cell" if stated else
                         "the module is not causal and hides no cell")
        if not stated:
            where = _where(attention, hidden.nonzero()[0])
            return Check(rule, "fail", f"the module is not causal but hides {amount(int(hidden[0, 0].sum()), 'cell')}, "
                                       f"e.g. {where}")
        return Check(rule, "fail", f"{stated}, but the module masks: it hides {_hidden_cells(attention, future)}")
    if attention.zeroed_after is not None:
        zeroed = attention.zeroed_after  # (b, h, nq, nk)
        seen = zeroed & ~hidden  # (b, h, nq, nk): weights the softmax gave out, not cells it already hid
        named = seen if seen.any() else zeroed  # (b, h, nq, nk)
        which = ("the future (above the diagonal)" if torch.equal(zeroed, future.expand_as(zeroed)) else
                 _where(attention, named.nonzero()[0]) + " and more" if zeroed.sum() > 1 else
                 _where(attention, named.nonzero()[0]))
        return Check(rule, "fail", f"the weights of {which} are set to 0 after the softmax, not hidden from it; "
                                   f"{MASK_AFTER_SOFTMAX}")
    if torch.equal(hidden, future.expand_as(hidden)):
        if declared is not None and declared < nk:
            return Check(rule, "fail", _window_not_applied(nq, nk, declared))
        if declared is not None:
            return _window_on_more_tokens(declared, nk, longer, stated=stated, unmasked=unmasked,
                                          triangles=triangles)
        return Check(rule, "pass", "the hidden cells are exactly the future (above the diagonal)")
    first = hidden[0, 0]  # (nq, nk)
    if not hidden.any():
        if stated and unmasked:
            return Check(rule, "fail", f"{stated}, yet no cell is hidden: {unmasked}")
        if stated:
            return Check(rule, "fail", f"{stated}, but no cell is hidden: {_no_mask_hint(attention)}")
        return Check(rule, "fail", "no cell is hidden: the causal mask never reached the scores "
                                   "(masked_fill returns a copy: keep it, or use masked_fill_)")
    fix = _triangle_fix(triangles, first)
    if nk > 1 and torch.equal(first, ~future):  # one token: hiding it is the hidden diagonal below
        if attention.float_mask:
            return Check(rule, "fail", "the mask is inverted: it hides the past and the token itself and shows the "
                                       f"future{_no_key_left(attention)}. {FLOAT_MASK}")
        return Check(rule, "fail", "the mask is inverted: it hides the past and the token itself and shows the "
                                   f"future{_no_key_left(attention)}. {INVERTED_FIX.get(attention.kind, '')}"
                                   "masked_fill hides where the mask is True; SDPA's boolean attn_mask keeps where it "
                                   "is True; nn.MultiheadAttention's hides where it is True")
    if nk > 1 and torch.equal(first, future.T):
        convention = FLOAT_MASK if attention.float_mask else FLIPPED_FIX.get(attention.kind, FLIPPED_FIX["softmax"])
        if fix and attention.kind in CONVENTIONS:
            convention = f"{fix}; {FLOAT_MASK if attention.float_mask else CONVENTIONS[attention.kind]}"
        elif fix:
            convention = fix
        return Check(rule, "fail", "the mask hides the past instead of the future (the triangle below the diagonal, "
                                   f"not above it): {convention}")
    for shift, words in ((0, "the diagonal is hidden too: each token hides itself"),
                         (2, "one future token is visible: row i sees key i + 1")):
        if torch.equal(first, torch.ones(nq, nk, dtype=torch.bool).triu(shift + nk - nq)):
            return Check(rule, "fail", f"{words} ({fix or 'hide exactly the keys after each query, j > i'})")
    wrong = (hidden != future.expand_as(hidden)).nonzero()[0]
    state = "hidden" if hidden[tuple(wrong)] else "visible"
    should = "visible" if state == "hidden" else "hidden"
    return Check(rule, "fail", f"{_where(attention, wrong)} is {state}; it should be {should}")


def _one_key_wide(declared: int) -> str:
    """mask-convention's words for hidden cells that keep one key more than the module's window of ``declared``:
    the convention of Mistral's reference code (``torch.triu(mask, diagonal=-sliding_window)``), not attnviz's."""
    return (f"each query keeps W + 1 = {declared + 1} keys, itself and {declared} behind, the convention of Mistral's "
            "reference code (torch.triu(mask, diagonal=-sliding_window)); attnviz and Hugging Face count W keys, the "
            "query's own included: hide diff >= W, not diff > W")


LONGEST_WINDOW_CHECK = 66  # tokens: a declared window W ≥ the checked tokens is traced again on W + 2 up to this


def _window_not_applied(nq: int, nk: int, declared: int) -> str:
    """mask-convention's words for hidden cells that are exactly the future when the module declares a window of
    ``declared`` < ``nk`` keys: the last query and the keys it sees that the window hides."""
    position = nk - 1  # the last query's position
    far = position - declared  # the nearest key the window hides
    keys = f"key 0, {declared} behind it" if far == 0 else f"keys 0 … {far}, {declared} or more behind it"
    wide = (" (or it hides only the keys more than W behind: diff > W instead of diff >= W)"
            if far == 0 else "")
    return (f"the hidden cells are exactly the future, but the module's window is {declared}: query {position} sees "
            f"{keys}, which a window of {declared} hides (query i sees keys "
            f"i - {declared - 1} … i) — the window is never applied{wide}: hide the keys W or more behind (diff >= W) "
            "as well as the future")


def _window_on_more_tokens(declared: int, nk: int, longer: Callable[[int], tracing.Attention | None] | None,
                           **words) -> Check:
    """mask-convention for a module that declares a window of ``declared`` ≥ ``nk``, the checked tokens, which hide
    only the future: its attention traced again on W + 2 tokens (``longer``, when W + 2 ≤ LONGEST_WINDOW_CHECK), where
    the window — or one a key too wide — shows, and checked there; else a pass that says the window was not
    exercised, and that a window of LONGEST_WINDOW_CHECK − 2 or less is (Mistral's W = 4,096 is not worth 4,098
    tokens)."""
    tokens = declared + 2
    attention = longer(tokens) if longer is not None and tokens <= LONGEST_WINDOW_CHECK else None
    if attention is None or attention.weights.shape[-1] != tokens:
        return Check("mask-convention", "pass", f"the hidden cells are exactly the future (above the diagonal); the "
                                                f"module's window of {declared} was not exercised: {counted(nk)} never "
                                                f"reach a key {declared} behind, and {tokens} are more than the check "
                                                f"runs — build it with a window of {LONGEST_WINDOW_CHECK - 2} or less "
                                                "(the same masking code), which is checked on W + 2 tokens")
    check = mask_convention(attention, True, declared, **words)
    return Check(check.rule, check.status,
                 f"on {tokens} tokens (the {nk} checked never reach a key {declared} behind): {check.evidence}")


def _no_mask_hint(attention: tracing.Attention) -> str:
    """What to do about a module said to be causal that hides no cell, in the terms of the call that computes its
    attention: nn.MultiheadAttention's attn_mask, SDPA's is_causal, or a masked_fill that must reach the scores."""
    if attention.kind == "nn.MultiheadAttention":
        return ("nn.MultiheadAttention masks only through its attn_mask: pass attn_mask=torch.ones(n, n, "
                "dtype=torch.bool).triu(1) (True hides), with is_causal=True if you like")
    if attention.kind == "sdpa":
        return "scaled_dot_product_attention was given no mask: pass is_causal=True (or a causal attn_mask)"
    return ("the module has no causal mask, or it never reached the scores (masked_fill returns a copy: keep it, or "
            "use masked_fill_)")


def _hidden_cells(attention: tracing.Attention, future: torch.Tensor) -> str:
    """The cells a module hides, in words: "the 28 cells above the diagonal (the future), e.g. …", a sliding
    window's, or "28 cells, e.g. …" (counted in the first item's first head)."""
    hidden = attention.hidden_cells()  # (b, h, nq, nk)
    count = int(hidden[0, 0].sum())
    where = _where(attention, hidden.nonzero()[0])
    window = sliding_window(attention)
    if torch.equal(hidden, future.expand_as(hidden)):
        return f"the {amount(count, 'cell')} above the diagonal (the future), e.g. {where}"
    if window is not None:
        return f"the future and the keys {window} or more behind (a sliding window of {window}), e.g. {where}"
    return f"{amount(count, 'cell')}, e.g. {where}"


INVERTED_FIX = {  # what to pass instead of an inverted mask, by the attention's kind
    "sdpa": "Pass SDPA the lower triangle, torch.tril(torch.ones(n, n, dtype=torch.bool)), or is_causal=True: ",
    "nn.MultiheadAttention": "Pass torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), or is_causal=True: ",
    "softmax": "Hide torch.triu(torch.ones(n, n), diagonal=1).bool() (or ~mask): ",
}
FLIPPED_FIX = {  # what to pass instead of a mask that hides the past, by the attention's kind
    "sdpa": "SDPA's boolean attn_mask keeps where it is True: pass torch.tril(torch.ones(n, n, dtype=torch.bool))",
    "nn.MultiheadAttention": "nn.MultiheadAttention's boolean attn_mask hides where it is True: pass "
                             "torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)",
    "softmax": "hide torch.triu(…, diagonal=1) with masked_fill, not torch.tril(…, diagonal=-1) (or the mask "
               "transposed)",
}


CONVENTIONS = {  # how a call's boolean attn_mask reads, by the attention's kind
    "sdpa": "SDPA's boolean attn_mask keeps where it is True",
    "nn.MultiheadAttention": "nn.MultiheadAttention's boolean attn_mask hides where it is True",
}
FLOAT_MASK = ("a float attn_mask is added to the scores: −∞ belongs above the diagonal only, "
              "torch.full((n, n), float('-inf')).triu(1)")


@dataclass(frozen=True)
class Triangle:
    """A triangle the module made, which may be its mask: a ``tril``/``triu`` call of its forward, or a mask buffer
    shaped like one (its nonzero cells)."""

    name: str  # "tril" or "triu"
    diagonal: int
    buffer: str | None = None  # the buffer's name; None: a call of the forward
    line: str = ""  # the call's place: " on line 12", " on line 40 of modeling_gpt2.py"

    def cells(self, n: int) -> torch.Tensor:
        """bool (n, n): the cells the triangle marks, in its top-left n × n corner."""
        ones = torch.ones(n, n, dtype=torch.bool)
        return ones.tril(self.diagonal) if self.name == "tril" else ones.triu(self.diagonal)

    def call(self, diagonal: int | None = None, name: str | None = None) -> str:
        return f"{name or self.name}(…, diagonal={self.diagonal if diagonal is None else diagonal})"


def _triangles(recording: tracing.Recording, module: nn.Module) -> list[Triangle]:
    """The triangles the module made: its forward's ``tril``/``triu`` calls (with their diagonal and line), then its
    square buffers whose nonzero cells are a ``tril`` or ``triu`` of diagonal −2 … 2 (a keep-mask of ones, a hide-mask,
    an additive −∞ mask)."""
    try:
        own_file = inspect.getsourcefile(type(module))
    except (TypeError, OSError):
        own_file = None
    found = []
    for index, name, diagonal in recording.triangles:
        op = recording.ops[index]
        if len(op.shape) < 2:
            continue
        line = "" if op.line is None else f" on line {op.line}"
        if op.line is not None and op.filename and op.filename != own_file:
            line += f" of {op.filename.rsplit('/', 1)[-1]}"
        found.append(Triangle(name, diagonal, line=line))
    for buffer_name, buffer in module.named_buffers():
        if buffer is None or buffer.dim() < 2 or buffer.shape[-1] != buffer.shape[-2] or buffer.shape[-1] < 2:
            continue
        square = buffer.reshape(-1, *buffer.shape[-2:])[0] != 0  # (c, c): the cells it marks
        for name in ("triu", "tril"):
            for diagonal in (1, 0, 2, -1, -2):
                if torch.equal(square.cpu(), Triangle(name, diagonal).cells(square.shape[-1])):
                    found.append(Triangle(name, diagonal, buffer=buffer_name))
                    break
            else:
                continue
            break
    return found


def _triangle_fix(triangles, hidden: torch.Tensor) -> str | None:
    """The fix in the module's own terms for hidden cells ``hidden`` (nq, nk) that are not the future: the first
    triangle whose cells are the hidden ones (a mask that hides: it should be triu(…, diagonal=1)) or the visible ones
    (a mask that keeps: tril(…, diagonal=0)), and the call it should be — "the bias buffer, tril(…, diagonal=1),
    marks the cells kept: build it with diagonal=0"; None when no triangle is the mask (or the map is not square)."""
    nq, nk = hidden.shape
    if nq != nk:
        return None
    for triangle in triangles:
        cells = triangle.cells(nq)  # (n, n)
        if torch.equal(cells, hidden.cpu()):
            marks, name, diagonal = "hidden", "triu", 1
        elif torch.equal(~cells, hidden.cpu()):
            marks, name, diagonal = "kept", "tril", 0
        else:
            continue
        wanted = f"diagonal={diagonal}" if triangle.name == name else triangle.call(diagonal, name)
        if triangle.buffer is not None:
            return f"the {triangle.buffer} buffer, {triangle.call()}, marks the cells {marks}: build it with {wanted}"
        return f"the {triangle.call()}{triangle.line} marks the cells {marks}: use {wanted}"
    return None


def _no_key_left(attention: tracing.Attention) -> str:
    """"; row 7 (query 7) hides every key, …" for the first row of the first map whose keys are all hidden (what the
    module gave there: NaN weights, or SDPA's own result); "" when every row keeps a key."""
    empty = attention.hidden_cells()[0, 0].all(-1).nonzero()  # (rows, 1): rows with no visible key
    if len(empty) == 0:
        return ""
    row = int(empty[0])
    words = f"; row {row} (query {row}) hides every key, so its softmax is 0/0: NaN weights"
    if attention.kind == "sdpa" and attention.returned is not None:
        given = attention.returned[0, 0, row]  # (dv,): what SDPA returned for that query
        if not torch.isnan(given).any():
            words += " (SDPA returns " + ("zeros" if not given.any() else "finite values") + " there instead)"
    return words


def sliding_window(attention: tracing.Attention) -> int | None:
    """W when the hidden cells are exactly the future and the keys W or more behind each query (1 ≤ W < n_key),
    the same in every item and head; None otherwise (a plain causal mask is no window)."""
    hidden = attention.hidden_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    diff = (torch.arange(nq)[:, None] + nk - nq) - torch.arange(nk)[None, :]  # (nq, nk): how far back each key is
    for window in range(1, nk):
        if torch.equal(hidden, ((diff < 0) | (diff >= window)).expand_as(hidden)):
            return window
    return None


def declared_window(module: nn.Module) -> int | None:
    """The sliding window a module says it has, in the spellings attention code uses: its own attribute (None there
    says it has none), else its config object's (:func:`_config_window`); a module that says neither reads its
    submodules — those that keep the attribute (transformers' Qwen2 and Gemma layers, whose ``sliding_window`` is None
    on a full-attention layer), else those whose config declares one (Mistral's layer reads
    ``self.config.sliding_window``) — when they all say the same.  None: none says one.  The one reader of
    mask-convention and kv-cache."""
    said = _attribute_window(module)
    if said is not _SAYS_NOTHING:
        return said
    if (window := _config_window(module)) is not None:
        return window
    subs = [sub for _, sub in module.named_modules() if sub is not module]
    kept = {window for sub in subs if (window := _attribute_window(sub)) is not _SAYS_NOTHING}
    if not kept:
        kept = {window for sub in subs if (window := _config_window(sub)) is not None}
    return kept.pop() if len(kept) == 1 else None


_SAYS_NOTHING = object()  # a module with no window attribute in any spelling


def _attribute_window(module: nn.Module):
    """The window a module keeps as an attribute (:func:`declared_size`); None when it keeps one of its spellings
    that is no size (None: no window on this layer); ``_SAYS_NOTHING`` when it keeps none."""
    window = declared_size(module, "sliding_window_size")
    spellings = user_code.SPELLINGS["sliding_window_size"]
    return window if window is not None or any(name in dir(module) for name in spellings) else _SAYS_NOTHING


def _config_window(module: nn.Module) -> int | None:
    """The window a module's config object (``self.config``, ``cfg`` …, as ``user_code`` reads one) declares for
    it, unless the config switches it off: ``use_sliding_window=False``; ``layer_types`` whose entry for the
    module's ``layer_idx`` (or, without one, any entry) is not "sliding_attention"; or, without ``layer_types``,
    ``max_window_layers`` above the module's ``layer_idx`` (Qwen2's layers below it attend to every key)."""
    for name in user_code.CONFIG_NAMES:
        config = getattr(module, name, None)
        window = next((getattr(config, spelling) for spelling in user_code.SPELLINGS["sliding_window_size"]
                       if user_code.is_size(getattr(config, spelling, None))), None)
        if window is None:
            continue
        layer, layer_types = getattr(module, "layer_idx", None), getattr(config, "layer_types", None)
        known = isinstance(layer, int) and not isinstance(layer, bool)
        if getattr(config, "use_sliding_window", True) is False:
            return None
        if isinstance(layer_types, list | tuple) and layer_types:
            kinds = {layer_types[layer]} if known and 0 <= layer < len(layer_types) else set(layer_types)
            return window if kinds == {"sliding_attention"} else None
        below = getattr(config, "max_window_layers", None)
        if isinstance(below, int) and below > 0 and (not known or layer < below):
            return None
        return window
    return None


def _width_unknown(latent: int) -> str:
    return (f"Q·Kᵀ runs over the module's {latent}-wide latent (W_UK absorbed into the queries, as DeepSeek-V3's MLA "
            "computes it), so its width is not the head_dim the scale divides by, and the module keeps no per-head "
            f"width attnviz knows ({', '.join(HEAD_DIM_NAMES)}): keep it as self.qk_head_dim to have the scale checked")


def scaling(attention: tracing.Attention, *, weightless: bool = False, width: ScoreWidth | None = None,
            declared: tuple[DeclaredScale, ...] = ()) -> Check:
    """``width``: the head_dim to judge the scale against (:func:`score_width`; None: the width of Q·Kᵀ);
    ``declared``: the scales the module declares (:func:`declared_scales`): its config's design passes, named, and a
    module that applies another (the book's 1/√head_dim among them) fails, naming both; an attribute of its own that
    holds a wrong scale is named in the failure."""
    rule = "scaling"
    if weightless:
        return Check(rule, "skip", "a module without weights (the book's simplified self-attention, 3.3) "
                                   "does not scale its scores")
    if attention.scale is None or attention.queries is None:
        return Check(rule, "skip", "the scale of the scores could not be identified")
    width = width or score_width(None, attention)
    if width.head_dim is None:
        return Check(rule, "skip", _width_unknown(width.latent))
    head_dim, name = width.head_dim, width.name
    absorbed = "" if width.latent is None else (
        f" ({width.source}: Q·Kᵀ runs over its {width.latent}-wide latent, W_UK absorbed into the queries, which "
        "leaves the scale as it is)")
    books = math.isclose(attention.scale, 1 / math.sqrt(head_dim), rel_tol=1e-4)
    design = _declared(attention.scale, declared, design=True)
    if books and design is None and (ignored := _other_design(declared, head_dim)) is not None:
        return Check(rule, "fail", _design_ignored(attention, width, ignored, absorbed))
    if books:
        return Check(rule, "pass", f"the scores are divided by √{name} = √{head_dim} ≈ {math.sqrt(head_dim):.3g}"
                                   f"{absorbed}")
    if design is not None:
        return Check(rule, "pass", f"the scores are divided by {design.words}; the book's is √{name} = √{head_dim}"
                                   f"{absorbed}")
    own = _declared(attention.scale, declared, design=False)
    ignored = _other_design(declared, head_dim)
    words = (_wrong_scale(attention, width, absorbed) if ignored is None
             else _design_ignored(attention, width, ignored, absorbed))
    return Check(rule, "fail", words + ("" if own is None else f" — the scale is the module's {own.words}"))


def _other_design(declared: tuple[DeclaredScale, ...], head_dim: int) -> DeclaredScale | None:
    """The first scale the module's config declares as its model's design (:func:`declared_scales`) that is not
    1/√``head_dim``: the scale the module must apply instead of the book's; None when the config declares none."""
    return next((found for found in declared
                 if found.design and not math.isclose(found.scale, 1 / math.sqrt(head_dim), rel_tol=1e-4)), None)


def _design_ignored(attention: tracing.Attention, width: ScoreWidth, design: DeclaredScale, absorbed: str) -> str:
    """scaling's failure for a module that does not apply the scale its config declares (``design``): the scale it
    applies (the book's √head_dim, none, or the number) and the declared one, named."""
    head_dim, scale = width.head_dim, attention.scale
    if math.isclose(scale, 1 / math.sqrt(head_dim), rel_tol=1e-4):
        measured, divisor = f"divided by √{width.name} = √{head_dim} ≈ {math.sqrt(head_dim):.3g}, the book's scale", (
            f"{math.sqrt(head_dim):.4g}")
    elif math.isclose(scale, 1.0, rel_tol=1e-6):
        measured, divisor = "not scaled", "1"
    else:
        measured, divisor = f"multiplied by {scale:.4g}, i.e. divided by {1 / scale:.4g}", f"{1 / scale:.4g}"
    return (f"the scores are {measured}, but the module's config declares the scale its model is trained with: "
            f"{design.words} — divide by {1 / design.scale:.4g}, not {divisor}{absorbed}{_scaled_twice(attention)}")


def _declared(scale: float, declared: tuple[DeclaredScale, ...], *, design: bool) -> DeclaredScale | None:
    """The first of ``declared`` (designs, or the module's own attributes) whose scale is ``scale``."""
    return next((found for found in declared
                 if found.design == design and math.isclose(scale, found.scale, rel_tol=1e-4)), None)


def _wrong_scale(attention: tracing.Attention, width: ScoreWidth, absorbed: str) -> str:
    """scaling's failure: what the module's scale is (unscaled, ÷√d_out, ÷head_dim, after the softmax …) and what
    it should be, √``width.head_dim``."""
    head_dim, scale, heads = width.head_dim, attention.scale, attention.weights.shape[1]
    want = f"divide by √{width.name} = √{head_dim} ≈ {math.sqrt(head_dim):.3g}{absorbed}"
    if width.latent is not None and math.isclose(scale, 1 / math.sqrt(width.latent), rel_tol=1e-4):
        return f"the scores are divided by √{width.latent}, the latent's width: {want}"
    want += _scaled_twice(attention)
    if not math.isclose(attention.weights_scale, 1.0, rel_tol=1e-6):
        before = "not scaled" if math.isclose(scale, 1.0, rel_tol=1e-6) else f"multiplied by {scale:.4g}"
        return (f"the scores are {before} before the softmax, and the weights are {_times(attention.weights_scale)} "
                f"after the softmax, which only shrinks every row's sum: {want} before the softmax, not after it")
    if math.isclose(scale, 1.0, rel_tol=1e-6):
        return f"the scores are not scaled: {want}"
    if heads > 1 and math.isclose(scale, 1 / math.sqrt(head_dim * heads), rel_tol=1e-4):
        return f"the scores are divided by √d_out = √{head_dim * heads} (the whole width): {want}"
    if math.isclose(scale, 1 / head_dim, rel_tol=1e-4):
        return f"the scores are divided by head_dim = {head_dim} without the square root: {want}"
    return f"the scores are multiplied by {scale:.4g}, i.e. divided by {1 / scale:.4g}: {want}"


def _scaled_twice(attention: tracing.Attention) -> str:
    """Words for a q or k multiplied by a number before the product whose scores are scaled again — by SDPA's own
    scale, or after the product ("" when only one of them scales)."""
    by_query, by_key = attention.operand_scales
    given = by_query * by_key
    if given == 1.0 or math.isclose(attention.scale, given, rel_tol=1e-6):
        return ""
    again = attention.scale / given
    who = (f"q is multiplied by {by_query:.4g}" if by_key == 1.0 else f"k is multiplied by {by_key:.4g}"
           if by_query == 1.0 else f"q and k are multiplied by {by_query:.4g} and {by_key:.4g}")
    if attention.kind == "sdpa":
        return (f" — {who} before scaled_dot_product_attention, which multiplies the scores by {again:.4g} as well "
                "(1/√head_dim unless given scale=): scale once (pass scale=1.0, or leave q and k as they are)")
    return f" — {who} before the product, and the scores by {again:.4g} after it: scale once"


def dropout_placement(module: nn.Module, x: torch.Tensor, eval_attention: tracing.Attention) -> Check:
    """In eval mode no dropout acts; in training mode dropout acts on the weights after the softmax (the module
    as handed over in training mode with dropout acting is the "forgot model.eval()" bug)."""
    rule = "dropout-placement"
    if _dropout_acts(eval_attention) and eval_attention.kind == "sdpa":
        return Check(rule, "fail", "in eval mode dropout still changes the attention weights: "
                                   "scaled_dot_product_attention drops whenever dropout_p > 0, whatever the module's "
                                   "mode — pass dropout_p=self.dropout if self.training else 0.0")
    if _dropout_acts(eval_attention):
        return Check(rule, "fail", "in eval mode dropout still changes the attention weights: pass "
                                   "training=self.training to F.dropout (or use nn.Dropout)")
    was_training = module.training
    try:
        module.train()  # one training-mode forward serves both questions
        attention, _ = tracing.combine(tracing.record(module, x).attentions)
    finally:
        module.train(was_training)
    if was_training and _dropout_acts(attention):
        share = attention.dropout_p or attention.dropout_after_p
        return Check(rule, "fail", f"the module is in training mode: dropout zeroes about {share:.0%} of the "
                                   "attention weights, so two runs of the same text differ — call "
                                   "module.eval() before looking at attention")
    if attention.dropout_ops:
        return Check(rule, "fail", "dropout acts on the scores before the softmax: the weights no longer sum to 1 "
                                   "in a predictable way; apply it to the weights after the softmax")
    if _dropout_acts(attention):
        return Check(rule, "pass",
                     "in training mode dropout acts on the weights after the softmax; in eval mode not at all")
    return Check(rule, "pass", "no dropout acts on the attention weights (in either mode)")


def _dropout_acts(attention: tracing.Attention) -> bool:
    """Whether a dropout acts on the weights: an SDPA / MultiheadAttention call's dropout_p, or the dropout between
    the softmax and @ V asked to drop (its own call's training and p — not whether the weights that reach V differ
    from the softmax's: a mask after the softmax changes them too, and other rules name it)."""
    return attention.dropout_p > 0 or attention.dropout_after_p > 0


def batch_independence(module: nn.Module, x: torch.Tensor, output: torch.Tensor) -> Check:
    rule = "batch-independence"
    generator = torch.Generator().manual_seed(2)
    for item in range(x.shape[0]):
        changed = x.clone()  # (b, n, d_in)
        others = [i for i in range(x.shape[0]) if i != item]
        changed[others] = torch.randn(changed[others].shape, generator=generator).to(x.dtype)
        with torch.no_grad():
            moved = (_output(module, changed)[item] - output[item]).abs()  # (n, d_out)
        if moved.max() > TOLERANCE:
            position = int(moved.amax(dim=-1).argmax())
            cause = _not_batch_first(module, x, changed, item) or ("something mixes the batch (a view or reshape "
                                                                   "across the batch dimension?)")
            return Check(rule, "fail", f"item {item}'s output at position {position} changed by "
                                       f"{moved.max().item():.3g} when only the other items changed: {cause}")
    return Check(rule, "pass", "no item's output moves when the other items change")


def _not_batch_first(module: nn.Module, x: torch.Tensor, changed: torch.Tensor, item: int) -> str | None:
    """Words for the ``nn.MultiheadAttention`` inside ``module`` built without ``batch_first=True`` that mixes the
    items — it reads ``x`` (batch, n, d) as batch tokens of n items, which the shapes cannot show when batch and n are
    as many — when with ``batch_first=True`` (set for one forward each, then restored) ``item``'s output no longer
    moves between ``x`` and ``changed``; None when there is none, or that does not settle it."""
    found = [(name, sub) for name, sub in module.named_modules()
             if name and isinstance(sub, nn.MultiheadAttention) and not sub.batch_first]
    if not found:
        return None
    try:
        for _, sub in found:
            sub.batch_first = True
        with torch.no_grad():
            still = (_output(module, changed)[item] - _output(module, x)[item]).abs().max().item()  # a float
    except tracing.TraceError:
        return None
    finally:
        for _, sub in found:
            sub.batch_first = False
    if still > TOLERANCE:
        return None
    return tracing.not_batch_first_words(found[0][0], tuple(x.shape), items_mixed=True)


def matches_reference(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                      scaled: bool = True, window: int | None = None, stated: str | None = None,
                      width: ScoreWidth | None = None, declared: tuple[DeclaredScale, ...] = ()) -> Check:
    """``stated``: who said whether the module is causal (:func:`_stated_causal`): a failure says its reference
    masks (or not) as that says, so a mask the statement and the module disagree on reads as one fault; ``width``:
    the head_dim the reference's scale divides by (:func:`score_width`; None: the width of Q·Kᵀ); ``declared``: the
    scales the module declares (:func:`declared_scales`): the reference scales as its config's design when the
    module does, as ``scaling`` passes it.  A failure that the module's own scale alone explains says so.  Keys and
    values that pair the query heads differently fail it too (:func:`_paired_alike`)."""
    check = _reference_verdict(recording, attention, causal, scaled=scaled, window=window, stated=stated, width=width,
                               declared=declared)
    return check if check.status == "skip" else _paired_alike(check, attention)


def _reference_verdict(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                       scaled: bool, window: int | None, stated: str | None, width: ScoreWidth | None,
                       declared: tuple[DeclaredScale, ...]) -> Check:
    if scaled and width is not None and width.head_dim is None and width.latent is not None:
        return Check("matches-reference", "skip", f"the reference's scale is not known: {_width_unknown(width.latent)}")
    head_dim = None if width is None else width.head_dim
    design = None if not scaled or attention.scale is None else _declared(attention.scale, declared, design=True)
    reference = functools.partial(_matches_reference, recording, attention, causal, scaled=scaled, window=window,
                                  head_dim=head_dim)
    check = reference(scale=None if design is None else design.scale)
    if check.status == "pass" and design is not None:
        check = Check(check.rule, "pass", f"{check.evidence} — the scores divided by {design.words}, as scaling found")
    precision = _inputs_precision(attention)
    if precision is not None and check.status != "skip":
        name, tolerance = precision
        check = Check(check.rule, check.status, f"{check.evidence} — the attention runs on {name} Q, K and V, which "
                      f"hold about {-math.log10(torch.finfo(getattr(torch, name)).eps):.0f} digits, so the rule "
                      f"allows {tolerance:.2g} ({name}'s eps × the largest |V|), not {TOLERANCE:g}"
                      + (", and it is off by more" if check.status == "fail" else ""))
    if check.status == "pass" and attention.weights.shape[-1] == 1:  # one key: its weight is 1 whatever the scores
        return Check(check.rule, "pass", check.evidence + " — with 1 token the one weight is 1 whatever the scores, "
                     "so this compares only V and the heads' order: check 2 or more tokens")
    if check.status == "fail" and attention.zeroed_after is not None:
        return Check(check.rule, "fail", f"{check.evidence} — {MASK_AFTER_SOFTMAX}")
    if check.status == "fail" and (low := _low_precision(attention)):
        return Check(check.rule, "fail", f"{check.evidence} — {low}")
    if check.status == "fail" and scaled and design is None and (cause := _scale_cause(attention, head_dim, reference)):
        return Check(check.rule, "fail", f"{check.evidence} — {cause}")
    if check.status == "fail" and stated:
        follows = "masks the future" if causal else "masks nothing"
        return Check(check.rule, "fail", f"{check.evidence} — the reference {follows}: {stated}")
    return check


def _paired_alike(check: Check, attention: tracing.Attention) -> Check:
    """``check`` failed when the query heads that share keys and those that share values cross (:func:`_crossed`):
    K repeated with ``repeat_interleave`` and V with ``.repeat`` (or the reverse), so a query head reads one K/V
    head's keys and another's values — an attention computation right for the K and V each head got, and still a
    bug.  Heads share keys (values) when theirs are equal (:func:`_head_groups`); where one side shares nothing
    (multi-head attention, values shared but keys per head), or every head that shares one shares the other
    (multi-query attention, grouped-query with K and V repeated alike), nothing is paired wrongly."""
    keys, values = _head_groups(attention.keys, attention.queries), _head_groups(attention.values, attention.queries)
    if keys is None or values is None or not _crossed(keys, values):
        return check
    head = next(head for head, (key, value) in enumerate(zip(keys, values, strict=True)) if key != value)
    pairing = (f"query head {head} reads K/V head {keys[head]}'s keys but K/V head {values[head]}'s values: the keys "
               f"group the query heads {_grouping(keys)}, the values {_grouping(values)} — repeat K and V the same "
               "way, e.g. repeat_interleave(group_size, dim=1) on both")
    if check.status == "fail":
        return Check(check.rule, "fail", f"{pairing}; and {check.evidence}")
    return Check(check.rule, "fail", f"{pairing} ({check.evidence}: each head's attention is right for the K and V "
                                     "it reads)")


PAIRING_TOLERANCE = 1e-6  # two heads' keys (or values) are one K/V head's when they differ by no more, × the largest


def _head_groups(tensor: torch.Tensor | None, queries: torch.Tensor | None) -> list[int] | None:
    """The K/V head each query head reads ``tensor`` (keys or values, (b, g or h, n, d)) from, numbered as the query
    heads first read them: query heads whose tensors are equal (≤ PAIRING_TOLERANCE × the largest |value|) share one
    — (0, 0, 1, 1) for ``repeat_interleave``, (0, 1, 0, 1) for ``.repeat``; None when the heads cannot be matched
    to the queries'."""
    if tensor is None or queries is None or tensor.dim() != 4 or queries.dim() != 4:
        return None
    per_head = _per_query_head(tensor, queries)  # (b, h, n, d)
    if per_head.shape[1] != queries.shape[1]:
        return None
    tolerance = PAIRING_TOLERANCE * max(1.0, per_head.abs().max().item())
    firsts: list[int] = []  # the first query head of each K/V head
    groups = []
    for head in range(per_head.shape[1]):
        group = next((number for number, first in enumerate(firsts)
                      if (per_head[:, head] - per_head[:, first]).abs().max().item() <= tolerance), len(firsts))
        if group == len(firsts):
            firsts.append(head)
        groups.append(group)
    return groups


def _crossed(keys: list[int], values: list[int]) -> bool:
    """Two query heads share keys but not values, and two share values but not keys: keys and values are not paired
    K/V head by K/V head.  Nested groups — every head that shares values shares keys too, as equal weights can make
    them — are paired so, and are not crossed."""
    pairs = [(a, b) for a in range(len(keys)) for b in range(a + 1, len(keys))]
    return (any(keys[a] == keys[b] and values[a] != values[b] for a, b in pairs)
            and any(values[a] == values[b] and keys[a] != keys[b] for a, b in pairs))


def _grouping(groups: list[int]) -> str:
    """The query heads of each K/V head, "(0, 1), (2, 3)" (the first four), named after the call that groups them
    so when one does: "as repeat_interleave does, (0, 1), (2, 3)"."""
    heads, count = len(groups), max(groups) + 1
    members = [[head for head, group in enumerate(groups) if group == number] for number in range(count)]
    shown = ", ".join("(" + ", ".join(map(str, member)) + ")" for member in members[:4]) + (", …" if count > 4 else "")
    if heads % count == 0 and groups == [head // (heads // count) for head in range(heads)]:
        return f"as repeat_interleave does, {shown}"
    if groups == [head % count for head in range(heads)]:
        return f"as .repeat does, {shown}"
    return shown


def _scale_cause(attention: tracing.Attention, head_dim: int | None, reference: Callable[..., Check]) -> str | None:
    """Words saying the scale is the difference, when ``reference`` (matches-reference's comparison, given a scale)
    passes with the module's own scale where it failed with 1/√``head_dim`` (None: the width of Q); else None."""
    if attention.scale is None or attention.queries is None:
        return None
    head_dim = head_dim or attention.queries.shape[-1]
    if math.isclose(attention.scale, 1 / math.sqrt(head_dim), rel_tol=1e-4) or (
            reference(scale=attention.scale).status != "pass"):
        return None
    how = "unscaled" if math.isclose(attention.scale, 1.0, rel_tol=1e-6) else f"× {attention.scale:.4g}"
    return (f"the difference is the scale alone: with the scores scaled as the module scales them ({how}, not "
            f"÷√{head_dim}), the reference matches (see scaling)")


def _inputs_precision(attention: tracing.Attention) -> tuple[str, float] | None:
    """(the dtype, the tolerance it allows) when the module's recorded Q, K or V are float16 or bfloat16 — SDPA run on
    ``q.bfloat16()`` in a float32 module: its output holds its inputs' precision, whatever precision it computes in —
    the dtype's eps × the largest |V| (a weight and the output each round once, by half an eps at most); None when
    they are float32 or float64."""
    tensors = [t for t in (attention.queries, attention.keys, attention.values) if t is not None]
    low = [t.dtype for t in tensors
           if t.is_floating_point() and torch.finfo(t.dtype).eps > torch.finfo(torch.float32).eps]
    if not low or attention.values is None:
        return None
    dtype = max(low, key=lambda low_dtype: torch.finfo(low_dtype).eps)
    largest = attention.values.float().abs().max().item()
    return str(dtype).removeprefix("torch."), max(TOLERANCE, torch.finfo(dtype).eps * largest)


def _matches_reference(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                       scaled: bool = True, window: int | None = None, head_dim: int | None = None,
                       scale: float | None = None) -> Check:
    rule = "matches-reference"
    if attention.queries is None or attention.keys is None or attention.values is None:
        lost = f" ({attention.lost})" if attention.lost else ""
        return Check(rule, "skip", f"the module's Q, K and V could not all be identified{lost}: the rule follows the "
                                   "softmax's input back through a scale and a mask to Q @ Kᵀ, and its output through "
                                   "dropout and numbers to weights @ V")
    queries, keys, values = attention.queries, attention.keys, attention.values  # (b, h, n, d)
    slopes, moved = _added_bias(attention)
    bias = None if slopes is None else slopes[..., None, None] * torch.arange(attention.masked.shape[-1])  # (b,h,1,nk)
    reference = reference_context(queries, keys, values, causal, scaled=scaled, window=window,
                                  bias=bias, head_dim=head_dim, scale=scale)  # (b, h, nq, dv)
    precision = _inputs_precision(attention)
    check = _compared_with(recording, attention, reference, TOLERANCE if precision is None else precision[1])
    if slopes is not None and check.status != "skip":
        return Check(rule, check.status, f"{check.evidence} — with the ALiBi bias the module adds to the scores (a "
                                         "slope per head times the key's position, m·j: the slopes are its own, not "
                                         "checked)")
    if check.status == "fail" and moved and _low_precision(attention) is None:  # else rounding moved them
        return Check(rule, "fail", f"{check.evidence} — the module adds to the scores something that is neither a mask "
                                   "(−∞, or a push down by 10³ + one per key or more) nor ALiBi's slope × key position "
                                   f"(the cells it shows move by up to {moved:.3g} against each other in a row): the "
                                   "reference adds nothing")
    return check


def _compared_with(recording: tracing.Recording, attention: tracing.Attention, reference: torch.Tensor,
                   tolerance: float = TOLERANCE) -> Check:
    """matches-reference's comparison of the module's concatenated heads (or output, or context) with ``reference``,
    the heads' context (b, h, nq, dv) computed from its own Q, K and V, to ``tolerance``."""
    rule = "matches-reference"
    if attention.rows_zeroed is not None:  # a head or query mask after the softmax: those rows' context is 0
        reference = reference.masked_fill(attention.rows_zeroed, 0.0)  # (b, h, nq, dv)
    b, h, nq, dv = reference.shape
    concat = reference.transpose(1, 2).reshape(b, nq, h * dv)  # (b, h, nq, dv) -> (b, nq, h·dv)
    if attention.out_proj is not None:  # nn.MultiheadAttention: compare its output after out_proj
        weight, bias = attention.out_proj
        expected = torch.nn.functional.linear(concat, weight, bias)  # (b, nq, E)
        return _compare(rule, attention.returned, expected, "the output", tolerance=tolerance)
    module_concat = _concat_fed_onwards(recording, attention, concat.shape)
    if module_concat is None:
        context = attention.returned if attention.returned is not None else attention.context
        if context is None:
            return Check(rule, "skip", "the module's context (weights · V) could not be identified")
        return _compare(rule, context, reference, "the context", tolerance=tolerance)
    if h > 1:
        return _compare(rule, module_concat, concat, "the concatenated heads", equals="equal", tolerance=tolerance)
    return _compare(rule, module_concat, concat, "the context", tolerance=tolerance)


def reference_context(queries, keys, values, causal: bool, *, scaled: bool = True,
                      window: int | None = None, bias: torch.Tensor | None = None,
                      head_dim: int | None = None, scale: float | None = None) -> torch.Tensor:
    """softmax(mask(Q·Kᵀ/√d_head))·V for (b, h, n, d) tensors, in float32 (unscaled for a weightless module;
    ``window``: the causal mask also hides the keys ``window`` or more behind; ``bias`` (b, h, 1, nk): added to the
    scaled scores, ALiBi's slope × key position; ``head_dim``: d_head when it is not the width d of Q and K, as in
    absorbed MLA's scores over the latent; ``scale``: what multiplies Q·Kᵀ instead of 1/√d_head — a config's own)."""
    queries, keys, values = queries.float(), _per_query_head(keys, queries), _per_query_head(values, queries)
    scores = queries @ keys.transpose(-2, -1)  # (b, h, nq, d) @ (b, h, d, nk) -> (b, h, nq, nk)
    if scaled and scale is not None:
        scores = scores * scale  # (b, h, nq, nk)
    elif scaled:
        scores = scores / math.sqrt(head_dim or queries.shape[-1])  # (b, h, nq, nk)
    if bias is not None:
        scores = scores + bias  # (b, h, nq, nk)
    if causal:
        nq, nk = scores.shape[-2:]
        diff = (torch.arange(nq)[:, None] + nk - nq) - torch.arange(nk)[None, :]  # (nq, nk): how far back
        hidden = (diff < 0) | (diff >= window) if window else diff < 0  # (nq, nk)
        scores = scores.masked_fill(hidden, -torch.inf)  # (b, h, nq, nk)
    return torch.softmax(scores, dim=-1) @ values  # (b, h, nq, nk) @ (b, h, nk, dv) -> (b, h, nq, dv)


def _added_bias(attention: tracing.Attention) -> tuple[torch.Tensor | None, float]:
    """What the module adds to its scaled scores besides the mask, read on the cells it shows (a constant per row
    aside: the softmax never sees one): (ALiBi's slopes (b, h) — a slope per head times the key's position —, 0.0),
    or (None, how far the shown cells of a row move against each other at most) for another bias; (None, 0.0) when
    it adds nothing."""
    if attention.scaled is None:
        return None, 0.0
    visible = ~attention.hidden_cells()  # (b, h, nq, nk)
    added = (attention.masked.float() - attention.scaled.float()).masked_fill(~visible, 0.0)  # (b, h, nq, nk)
    steps = added[..., 1:] - added[..., :-1]  # (b, h, nq, nk - 1): from key j to key j + 1
    both = visible[..., 1:] & visible[..., :-1]  # (b, h, nq, nk - 1)
    tolerance = 1e-4 * max(1.0, attention.scaled.float().abs().max().item())
    if not both.any() or steps[both].abs().max().item() <= tolerance:
        return None, 0.0
    slopes = steps.masked_fill(~both, math.nan).flatten(-2).nanmedian(dim=-1).values.nan_to_num()  # (b, h)
    if (steps - slopes[..., None, None])[both].abs().max().item() <= tolerance:
        return slopes, 0.0
    shown_max = added.masked_fill(~visible, -math.inf).amax(-1)  # (b, h, nq)
    shown_min = added.masked_fill(~visible, math.inf).amin(-1)  # (b, h, nq)
    spread = (shown_max - shown_min)[visible.any(-1)]  # (rows with a shown key,)
    return None, spread.max().item() if spread.numel() else 0.0


RESETS = ("reset_cache", "reset_kv_cache")  # the names a module's own cache reset goes by
CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "layer_past", "past_kv", "cache")  # a cache the caller holds


def _cache_parameters(module: nn.Module) -> tuple[bool, str | None]:
    """How the module's forward takes a cache: (whether it takes ``use_cache``, the name of its parameter that takes a
    cache the caller holds — Hugging Face's past_key_values: :data:`CACHE_ARGUMENTS` — or None)."""
    parameters = inspect.signature(module.forward).parameters
    return "use_cache" in parameters, next((name for name in CACHE_ARGUMENTS if name in parameters), None)


def kv_cache(module: nn.Module, x: torch.Tensor, causal: bool = True, *,
             sizes: Mapping[str, int] | None = None) -> Check:
    """Two sequences in a row, each after the module's reset, fed as a prefill then token by token with
    ``use_cache=True``, must give the uncached outputs; a forward without ``use_cache``, or one token, skips.  A
    cache the caller holds (a ``past_key_values`` argument, and no reset) is checked by passing each forward's
    returned cache to the next, when the module is ``causal`` (else a prefill cannot equal the whole sequence's first
    tokens, which see the later ones).  ``sizes``: the module's sizes by attnviz setting where it does not keep them
    under a known name (:func:`_cache_excess`)."""
    rule = "kv-cache"
    takes_use_cache, cache_name = _cache_parameters(module)
    if not takes_use_cache and cache_name is None:
        return Check(rule, "skip", "the forward takes no use_cache: the module keeps no KV cache")
    reset_name = next((name for name in RESETS if callable(getattr(module, name, None))), None)
    if reset_name is None and cache_name is None:
        return Check(rule, "fail", "the forward takes use_cache but the module has no reset_cache() or "
                                   "reset_kv_cache(): a second sequence would attend to the first one's cache")
    n = x.shape[1]
    if n == 1:
        return Check(rule, "skip", "1 token: nothing to feed after the prefill from the cache — check 2 or more "
                                   "tokens")
    prefill = kv_prefill(n)
    if reset_name is None or not takes_use_cache:
        if not causal:
            return Check(rule, "skip", f"the cache is passed in as {cache_name}, and the module is not causal: its "
                                       "first tokens see the later ones, so a prefill cannot give them: not checked")
        return _passed_back(module, x, cache_name, {"use_cache": True} if takes_use_cache else {}, prefill, sizes)
    reset = _user_reset(module, reset_name)
    refused = _chunk_unfed(module)  # why the module takes no chunk after its cache: then its tokens go one by one
    try:
        try:
            try:
                difference = _cached_difference(module, reset, [x[:1], x[1:2]], prefill,  # two different sequences
                                                reset_name=reset_name, chunk=refused is None)
            except _ChunkRefusedError as error:
                refused = _refused_words(error)
                difference = _cached_difference(module, reset, [x[:1], x[1:2]], prefill, reset_name=reset_name,
                                                chunk=False)
            held = _cache_held(module, reset, x[1:2]) if difference is None else None  # after the second one
        finally:
            reset()
    except time_limit.UserCallError as error:  # the reset's own code failed or never returned: no new sequence
        return Check(rule, "fail", str(error))
    if difference is not None:
        return Check(rule, "fail", difference)
    words = (f"two sequences, each after {reset_name}(): {_plan_words(n, prefill, refused)}, give the uncached outputs "
             f"(≤ {TOLERANCE:g})")
    return _held_verdict(module, _with_refused(words, refused), held, n, sizes)


def _held_verdict(module: nn.Module, words: str, held: _CacheHeld | None, n: int,
                  sizes: Mapping[str, int] | None = None, supplied: str | None = None) -> Check:
    """kv-cache's verdict on cached outputs that were right (``words``): a pass saying what the cache holds after
    ``n`` tokens, or a fail naming the waste its declared variant exists to save (:func:`_cache_excess`).
    ``supplied``: the type of the cache object attnviz handed the forward, which it only adds to — what that object
    keeps is its own choice, so more tokens than the window needs are said in the pass, not failed."""
    if held is None:
        return Check("kv-cache", "pass", words)
    excess = _cache_excess(module, held, n, sizes, window=supplied is None)
    if excess is not None:
        return Check("kv-cache", "fail", f"{words}, but {excess}")
    words = f"{words}; after {counted(n)} the cache holds {held.words()}"
    over = _over_window(module, held, sizes) if supplied is not None else None
    if over is not None:
        window = over[1]
        words += (f" — more than a window of W = {window} needs, and not the layer's doing: the {supplied} attnviz "
                  "hands it keeps every token, and the layer only adds to it (a transformers model hands a "
                  "sliding-window layer DynamicCache(config=…), whose DynamicSlidingWindowLayer keeps the last "
                  f"W − 1 = {window - 1})")
    return Check("kv-cache", "pass", words)


KV_CHUNK = 2  # the tokens of kv-cache's last cached forward, fed together after a non-empty cache


def kv_steps(n: int, prefill: int, *, chunk: bool = True) -> list[tuple[int, int]]:
    """(start, stop) of kv-cache's forwards on n tokens: the prefill's ``prefill`` tokens (:func:`kv_prefill`), then
    one token at a time, the last ``KV_CHUNK`` together (a chunk after a non-empty cache: its mask must offset its
    queries by the cached tokens) when ``chunk`` and at least one token goes alone before them."""
    singles = n - KV_CHUNK if chunk and n - prefill > KV_CHUNK else n
    return [(0, prefill), *((i, i + 1) for i in range(prefill, singles)), *([(singles, n)] if singles < n else [])]


def _is_chunk(start: int, stop: int) -> bool:
    """Whether kv-cache's cached forward over tokens ``start`` … ``stop - 1`` is its chunk (:func:`kv_steps`)."""
    return start > 0 and stop - start > 1


class _ChunkRefusedError(Exception):
    """A cached forward raised on kv-cache's chunk (:func:`kv_steps`), every step before it right: a module that takes
    one token per cached step.  Its message: the forward's error, in words."""


def _chunk_unfed(module: nn.Module) -> str | None:
    """Why kv-cache feeds the module no chunk after its cache (None: it does): a forward that takes an
    ``attention_mask`` (a Hugging Face layer) gets the mask for a chunk from its model, and attnviz passes none."""
    if "attention_mask" not in inspect.signature(module.forward).parameters:
        return None
    return ("the forward takes an attention_mask, which its model builds for a chunk after the cache (SDPA's is_causal "
            "alone aligns to the top-left), and attnviz passes none")


def _refused_words(error: _ChunkRefusedError) -> str:
    """Why the module took no chunk after its cache: the cached forward raised on it (``error``) — a module written for
    one token a step, or a mask sliced for the new tokens alone (``mask[:n, :n]``, right for one token and no shape
    for a chunk): which, only the module's author knows."""
    return (f"{error} — right if the module takes one token per cached step; "
            "if not, its mask (or positions) does not count the cached keys: slice it from the cached tokens' count")


def _plan_words(n: int, prefill: int, refused: str | None) -> str:
    """How kv-cache fed n tokens: "a prefill of 4 tokens, then 2 tokens one by one and the last 2 in one forward"
    (one by one to the end when the module ``refused`` the chunk)."""
    steps = kv_steps(n, prefill, chunk=refused is None)
    start, stop = steps[-1]
    if not _is_chunk(start, stop):
        return f"a prefill of {counted(prefill)}, then {counted(n - prefill)} one by one"
    return (f"a prefill of {counted(prefill)}, then {counted(start - prefill)} one by one and the last "
            f"{stop - start} in one forward (a chunk after the cache)")


def _with_refused(words: str, refused: str | None) -> str:
    """kv-cache's pass ``words``, saying why the chunk after the cache was not checked (``refused``: the reason)."""
    if refused is None:
        return words
    return f"{words} — a chunk of {KV_CHUNK} after the cache not checked: {refused}"


def _passed_back(module: nn.Module, x: torch.Tensor, cache_name: str, flags: dict, prefill: int,
                 sizes: Mapping[str, int] | None = None) -> Check:
    """kv-cache for a cache the caller holds: two sequences, each a prefill then token by token, every forward given
    (as ``cache_name``) the cache the forward before returned, must give the uncached outputs.  A forward that returns
    none is given a cache object the caller holds, which it fills in place (a Hugging Face ``DynamicCache``, when
    transformers is installed), from the first forward on: the same object, or the one it returns."""
    rule = "kv-cache"
    sequences = [x[:1], x[1:2]]  # two different sequences, (1, n, d_in) each
    with torch.no_grad():
        expected = [_output(module, sequence) for sequence in sequences]  # (1, n, d_out) each
        last: dict = {}  # the cache after the last sequence's last token
        refused = _chunk_unfed(module)  # why the module takes no chunk after its cache: then its tokens go one by one
        fed = functools.partial(_fed_back, module, sequences, expected, cache_name, flags, prefill)
        try:
            result = fed(lambda: None, last, chunk=refused is None)
        except _ChunkRefusedError as error:
            refused = _refused_words(error)
            result = fed(lambda: None, last, chunk=False)
        held = None
        if result == "none returned" and (held := _cache_object()) is not None:
            try:
                result = fed(_cache_object, last, chunk=refused is None)
            except _ChunkRefusedError as error:
                refused = _refused_words(error)
                result = fed(_cache_object, last, chunk=False)
        if result in ("none returned", "takes no cache object"):  # nothing to feed the next step: nothing to follow
            empty = held is not None and result == "none returned"
            return Check(rule, "skip", f"the cache is passed in as {cache_name} but the forward returns none to pass "
                                       "back" + (f" and leaves the {type(held).__name__} it is given empty"
                                                 if empty else "") + ": not checked")
        if result is not None:
            return Check(rule, "fail", result)
        measured = _returned_held(module, sequences[1], cache_name, flags,
                                  (lambda: None) if held is None else _cache_object, last.get("cache"))
    given = ("the cache the forward before returned" if held is None else
             f"the {type(held).__name__} the forward before filled")
    n = x.shape[1]
    words = (f"two sequences: {_plan_words(n, prefill, refused)}, each given {given} ({cache_name}), give the uncached "
             f"outputs (≤ {TOLERANCE:g})")
    return _held_verdict(module, _with_refused(words, refused), measured, n, sizes,
                         None if held is None else type(held).__name__)


def _returned_held(module: nn.Module, sequence: torch.Tensor, cache_name: str, flags: dict,
                   new_cache: Callable[[], object], last) -> _CacheHeld | None:
    """What a cache the caller holds holds after a sequence: the tensors of ``last`` (the cache the last forward
    returned, or the cache object it filled: :func:`_tensors_in`, named by ``cache_name``), their tokens counted
    along the dimension that grows by one from ``sequence``'s first token, fed with ``new_cache()``, to its second,
    fed with the cache the first returned; None when ``last`` holds no tensor or those forwards raise."""
    now = {path: value.detach() for path, value in _tensors_in(cache_name, last).items()}
    if not now:
        return None
    fed, cache = [], new_cache()
    for tokens in (1, 2):
        try:
            output = tracing.run_forward(module, sequence[:, tokens - 1:tokens], **flags, **{cache_name: cache})
        except tracing.TraceError:  # these forwards ran before without raising: nothing more to say
            return None
        cache = _next_cache(output, tokens, cache)
        fed.append({path: value.shape for path, value in _tensors_in(cache_name, cache).items()})
    return _held(now, fed)


def _cache_object():
    """A new, empty cache object of the kind Hugging Face layers fill in place (transformers' ``DynamicCache``), or
    None when transformers is not installed: it is optional, imported only for a module that needs it."""
    try:
        from transformers import DynamicCache
    except ImportError:
        return None
    return DynamicCache()


def _fed_back(module: nn.Module, sequences: list[torch.Tensor], expected: list[torch.Tensor], cache_name: str,
              flags: dict, prefill: int, new_cache: Callable[[], object], last: dict | None = None, *,
              chunk: bool = True) -> str | None:
    """The first cached forward that raises or differs, in words; None when none does; "none returned" when a
    forward returns no cache and was given no cache object it filled.  Each sequence starts from ``new_cache()``
    (None, or an empty cache object), each forward is given the cache the forward before returned (or, returning
    none, the object it was given); ``last["cache"]`` is the cache after the last forward.  ``chunk``: the last
    tokens in one forward (:func:`kv_steps`); one that raises on them is :class:`_ChunkRefusedError`."""
    for number, (sequence, wanted) in enumerate(zip(sequences, expected), start=1):
        cache = first = new_cache()

        def rerun(start: int, *, sequence=sequence) -> dict:  # the forwards before ``start`` again
            cache = new_cache()
            for before, stop in kv_steps(sequence.shape[1], prefill):
                if before == start:
                    break
                output = tracing.run_forward(module, sequence[:, before:stop], **flags, **{cache_name: cache})
                cache = _next_cache(output, stop, cache)
            return {**flags, cache_name: cache}

        for start, stop in kv_steps(sequence.shape[1], prefill, chunk=chunk):
            try:
                output = tracing.run_forward(module, sequence[:, start:stop], what="a cached forward",
                                             **flags, **{cache_name: cache})
            except tracing.TraceError as error:  # the cache's code raised on its own cache: the rule fails
                if first is not None and number == 1 and start == 0:
                    return "takes no cache object"  # a forward that raises given one is not written for one
                if _is_chunk(start, stop):
                    raise _ChunkRefusedError(str(error)) from error
                return f"{error} (given the cache the forward before returned as {cache_name})"
            got = tracing.first_tensor(output)
            problem = _cached_output_problem(got, wanted[:, start:stop], sequence[:, start:stop])
            if problem is not None:
                return f"sequence {number}, {_step_words(start, stop)}: {problem}"
            got = got.detach()  # (1, q, d_out)
            cache = _next_cache(output, stop, cache)
            if cache is None or (start == 0 and _empty(cache)):
                return "none returned"
            worst = (got.float() - wanted[:, start:stop].float()).abs().nan_to_num(nan=math.inf).max().item()
            if worst > TOLERANCE:
                step = _step_words(start, stop)
                cause = _step_cause(module, sequence, start, stop, functools.partial(rerun, start))
                given = ("the cache the forward before returned" if first is None else
                         f"the {type(first).__name__} the forward before filled")
                if cause is not None:
                    return (f"sequence {number}, {step}: the cached output differs from the uncached one by "
                            f"{worst:.3g} — {cause} (each forward given {given} as {cache_name})")
                return (f"sequence {number}, {step}: the cached output differs from the uncached one by {worst:.3g} — "
                        f"given {given} as {cache_name}, the step does not compute what the whole sequence computes "
                        "at that position")
        if last is not None:
            last["cache"] = cache
    return None


def _next_cache(output, stop: int, given):
    """The cache the next forward is given: the one this forward returned, else the cache object it was given (Hugging
    Face layers fill theirs in place and return only the output and the weights)."""
    returned = _returned_cache(output, tracing.first_tensor(output), stop)
    if given is not None and not isinstance(given, tuple | list | torch.Tensor) and isinstance(returned, torch.Tensor):
        return given  # given a cache object, a tensor beside the output is not the cache (the weights, say)
    return returned if returned is not None else given


def _empty(cache) -> bool:
    """Whether a cache object holds no token (a ``get_seq_length()`` of 0: the forward did not fill it)."""
    length = getattr(cache, "get_seq_length", None)
    return callable(length) and length() == 0


def _returned_cache(output, out: torch.Tensor, keys: int):
    """The cache a forward returned beside its output ``out`` (Hugging Face's ``(out, present)``, or a
    ``past_key_values`` entry): what follows the output; None when nothing does — attention weights (…, q, ``keys``)
    are not a cache."""
    if isinstance(output, dict):
        return next((output[name] for name in (*CACHE_ARGUMENTS, "present", "presents")
                     if output.get(name) is not None), None)
    if not isinstance(output, tuple | list):
        return None
    weights = (out.shape[-2], keys)  # (q, keys): the shape of the step's attention weights
    rest = [item for item in output[1:] if item is not None
            and not (isinstance(item, torch.Tensor) and item.dim() >= 2 and tuple(item.shape[-2:]) == weights)]
    return rest[0] if rest else None


def _user_reset(module: nn.Module, name: str):
    """The module's reset method ``name`` as a call without arguments under the time limit of a user's call, whose
    failure is a one-line :class:`attnviz.time_limit.UserCallError` naming it."""
    return functools.partial(time_limit.call_in_words, f"{type(module).__name__}.{name}()", getattr(module, name))


def kv_prefill(n: int) -> int:
    """How many of n tokens kv-cache's prefill feeds at once (the rest go one by one: :func:`kv_steps`)."""
    return max(1, min(n - 1, n // 2))


def _cached_difference(module: nn.Module, reset, sequences: list[torch.Tensor], prefill: int, *,
                       reset_name: str = "reset_cache", chunk: bool = True) -> str | None:
    """The first cached forward that raises, or whose output differs from the uncached one, with its likely cause
    (None: none).  An uncached forward that raises is a TraceError: the module fails without its cache too.
    ``chunk``: the last tokens in one forward (:func:`kv_steps`); one that raises on them is
    :class:`_ChunkRefusedError`."""
    moved: set[str] = set()  # the module's int attributes a cached forward changed: its position counter among them
    ahead = None  # words for the first step after which a usual position counter is past the tokens fed
    kept: list[str] = []  # the tensors the first sequence's forwards filled that the reset left as they were
    emptied: dict[str, tuple[torch.Tensor, int | None]] = {}  # what the module keeps right after the first reset
    with torch.no_grad():
        expected = [_output(module, sequence) for sequence in sequences]  # uncached first: a run may reset positions
        for number, (sequence, wanted) in enumerate(zip(sequences, expected), start=1):
            before_reset = _held_tensors(module)
            reset()
            if number == 2:
                now = _held_tensors(module)
                filled = [name for name, held in before_reset.items() if not _same_held(emptied.get(name), held)]
                kept = [name for name in filled if _same_held(now.get(name), before_reset[name])
                        and sequences[0].shape[1] in before_reset[name][0].shape]  # holding the tokens fed
            emptied = _held_tensors(module)  # what the forwards after this reset replace or change is their cache
            started = _counters(module)
            for forwards, (start, stop) in enumerate(kv_steps(sequence.shape[1], prefill, chunk=chunk)):
                before = _counters(module)
                try:
                    output = tracing.run_forward(module, sequence[:, start:stop], what="a cached forward",
                                                 use_cache=True)
                except tracing.TraceError as error:  # the cache's code raised (or called sys.exit): the rule fails
                    if _is_chunk(start, stop):  # every step before it right: a module that takes one token a step
                        raise _ChunkRefusedError(str(error)) from error
                    return str(error)
                after = _counters(module)
                moved |= {name for name, value in after.items() if before.get(name) != value}
                got = tracing.first_tensor(output)
                problem = _cached_output_problem(got, wanted[:, start:stop], sequence[:, start:stop])
                if problem is not None:
                    return f"sequence {number}, {_step_words(start, stop)}: {problem}"
                got = got.detach()  # (1, q, d_out)
                worst = (got.float() - wanted[:, start:stop].float()).abs().nan_to_num(nan=math.inf).max().item()
                if worst > TOLERANCE:
                    step = _step_words(start, stop)
                    counter = _counter(before, after, moved, number, forwards)
                    cause = _reset_cause(reset_name, kept, counter) if number == 2 and kept else None
                    return (f"sequence {number}, {step}: the cached output differs from the uncached one by "
                            f"{worst:.3g} — " + (cause or _cache_cause(module, reset, sequence, prefill, start, stop,
                                                                       counter)))
                ahead = ahead or _counter_ahead(module, after, started, moved, number, stop)
    return ahead


def _held_tensors(module: nn.Module) -> dict[str, tuple[torch.Tensor, int | None]]:
    """Every tensor the module keeps (:func:`_kept_tensors`): path -> (the tensor, its version counter: an in-place
    change moves it; None for an inference tensor, :func:`_version`)."""
    return {path: (tensor, _version(tensor)) for path, tensor in _kept_tensors(module).items()}


def _same_held(a: tuple[torch.Tensor, int | None] | None, b: tuple[torch.Tensor, int | None] | None) -> bool:
    """Whether two of :func:`_held_tensors`' entries are the same tensor, unchanged in between (as far as its version
    counter tells: an inference tensor has none)."""
    return a is not None and b is not None and a[0] is b[0] and a[1] == b[1]


def _reset_cause(reset_name: str, kept: list[str], counter: _Counter | None) -> str:
    """Words for a reset that leaves the cache the first sequence filled (``kept``: the tensors the cached forwards
    replaced or changed, still the same after the reset), and perhaps the position too (``counter``)."""
    names = "/".join(kept)
    if counter is not None and counter.usual and counter.before != 0:
        return (f"{reset_name}() resets nothing: the second sequence starts at {counter.name} = {counter.before}, "
                f"not 0, and still attends over the first one's keys ({names} keep them) — in the reset, empty "
                f"{names} and set {counter.name} back to 0")
    return (f"after {reset_name}() the next sequence still attends over the last one's keys: empty {names} in the "
            "reset")


def _counter_ahead(module: nn.Module, after: dict[str, int], started: dict[str, int], moved: set[str], number: int,
                   stop: int) -> str | None:
    """Words for a position counter (one of POSITION_NAMES that the cached forwards move) that is past the ``stop``
    tokens fed so far after a cached forward whose output was right — a reset that left it where the last sequence
    did (``started``: the module's ints right after this sequence's reset), or a forward that adds too much — and why
    the outputs agree: a causal mask's later row still shows every cached key, and a rotary module's scores depend
    only on i − j, which moving every position alike keeps; None when it counts them (a counter behind them may be a
    window's fill pointer: not named)."""
    name = next((name for name in POSITION_NAMES if name in after and name in moved), None)
    if name is None or after[name] <= stop:
        return None
    why = ("the outputs agree only because the shift does not show yet: the mask still shows every cached key, and "
           "rotary scores depend only on the distance i − j, which moving every position alike keeps; the position "
           "reaches the end of a rotary table or mask before the tokens do" if _rotary(module) else
           "the outputs agree only because a later row of the causal mask still shows every cached key; the position "
           "reaches the mask's end before the tokens do")
    where = f"{name} is {after[name]} after {counted(stop)} of sequence {number}, where it should be {stop}"
    if started.get(name, 0) != 0:
        return (f"the cached outputs agree with the uncached ones, but the reset forgets the position: {where} (the "
                f"reset left it at {started[name]}; {why}) — set it back to 0 in the reset")
    return (f"the cached outputs agree with the uncached ones, but the position runs ahead of the tokens: {where}, so "
            f"the next token is treated as position {after[name]}, not {stop} ({why}) — add exactly the new tokens' "
            "count (x.shape[1]) after each cached forward")


def _step_words(start: int, stop: int) -> str:
    """kv-cache's name for the cached forward over tokens ``start`` … ``stop - 1``."""
    if _is_chunk(start, stop):
        return f"tokens {start} … {stop - 1} (a chunk of {stop - start} after {counted(start)} cached)"
    return f"token {start}" if start > 0 else f"{_tokens_up_to(stop)} (the prefill)"


def _cached_output_problem(got, wanted: torch.Tensor, fed: torch.Tensor) -> str | None:
    """Words for a cached forward's output ``got`` that cannot be compared with the uncached ``wanted``: no tensor,
    another shape than one vector per token fed (``fed`` (1, q, d_in)), or NaN / ∞ where the uncached output is
    finite; None when it can be compared."""
    if not isinstance(got, torch.Tensor):
        return "the cached forward returned no tensor"
    if got.shape != wanted.shape:
        return (f"the cached forward returned shape {tuple(got.shape)} for an input of shape {tuple(fed.shape)}: an "
                f"attention module returns one vector per token, {tuple(wanted.shape)}, with the cache too")
    bad = ~torch.isfinite(got) & torch.isfinite(wanted)  # (1, q, d_out)
    if bad.any():
        positions = bad.any(dim=-1)  # (1, q)
        what = "NaN" if torch.isnan(got[bad]).any() else "∞"
        return (f"the cached forward returns {what} at {int(positions.sum())} of {positions.numel()} positions "
                "where the uncached one is finite — the cached path computes something invalid (a division by 0, an "
                "empty softmax row, a NaN it multiplies by?)")
    return None


def _tokens_up_to(stop: int) -> str:
    """"token 0" for the first token alone, "tokens 0 … 3" for the first four."""
    return "token 0" if stop == 1 else f"tokens 0 … {stop - 1}"


POSITION_NAMES = ("ptr_current_pos", "ptr_cur", "current_pos", "cache_pos", "pos", "offset", "start_pos")


@dataclass(frozen=True)
class _Counter:
    """The module's position counter around the cached forward that differs."""

    name: str
    before: int  # its value before that forward
    after: int  # and after it
    usual: bool  # kept under one of POSITION_NAMES and trusted (:func:`_counter`); else: the one int the forwards moved
    number: int  # the sequence (1 or 2)
    forwards: int  # the cached forwards of this sequence before that one


def _counters(module: nn.Module) -> dict[str, int]:
    """The module's own int attributes (not bool): its position counter, if it keeps one, among them."""
    return {name: value for name, value in vars(module).items()
            if isinstance(value, int) and not isinstance(value, bool) and not name.startswith("_")}


def _counter(before: dict[str, int], after: dict[str, int], moved: set[str], number: int,
             forwards: int) -> _Counter | None:
    """The module's position counter: an int under one of POSITION_NAMES that the cached forwards changed, or that
    is the only candidate (no other int changed: a counter that never moves); else the one int attribute the cached
    forwards changed, kept as not usual — its words then need the step's mask to agree (None: neither).  A usual
    name alone is no evidence: OPT keeps a constant ``offset = 2``."""
    usual = [name for name in POSITION_NAMES if name in before and name in after]
    changed = sorted(name for name in moved if name in before and name in after)
    trusted = [name for name in usual if name in changed] or (usual if not set(changed) - set(usual) else [])
    names = trusted or (changed if len(changed) == 1 else [])
    if not names:
        return None
    return _Counter(names[0], before[names[0]], after[names[0]], bool(trusted), number, forwards)


def _cache_cause(module: nn.Module, reset, sequence: torch.Tensor, prefill: int, start: int, stop: int,
                 counter: _Counter | None) -> str:
    """The likely cause of a cached step that differs: the module's position counter, how many tokens its cache holds
    (its growth per token), else what the step's attention shows (:func:`_step_cause`)."""
    if counter is not None and counter.usual:  # its value alone: a counter that never moves, counts forwards …
        words = _counter_cause(counter, start, stop, counter.before, mask_shows=False)
        if words is not None:
            return words
    words = _held_cause(module, reset, sequence, stop)
    if words is not None:
        return words

    def rerun() -> dict:  # the forwards of this sequence before ``start`` again, from a reset
        reset()
        for before, step_stop in kv_steps(sequence.shape[1], prefill):
            if before == start:
                break
            tracing.run_forward(module, sequence[:, before:step_stop], use_cache=True)
        return {"use_cache": True}

    return (_step_cause(module, sequence, start, stop, rerun, counter)
            or "the cached step does not compute what the whole sequence computes at that position")


def _counter_cause(counter: _Counter, start: int, stop: int, position: int, *, mask_shows: bool = True) -> str | None:
    """Words for a position counter that does not count the tokens fed so far — never moves, counts forwards, counts
    each token k times (k × the tokens fed, moved by k × the step's) —, when the step puts its first token at
    ``position`` (the counter's own value, or where the step's mask puts it); None when it counts them.  A counter
    that is merely another number than the tokens fed (a cache's fill pointer moves back when a window drops keys)
    is named only when ``mask_shows``: the step's mask puts the token where the counter says."""
    name, value = counter.name, counter.before
    what = name if counter.usual else f"{name} (the int the cached forwards change)"
    if counter.number == 2 and start == 0 and value != 0 and position == value:
        return (f"the reset forgets the position: after the reset the second sequence starts at {name} = {value}, "
                "not 0 — set it back to 0 in the reset too")
    if value == start or position != value:
        return None
    if start > 0 and counter.after == value:
        return (f"the position never advances: {what} is still {value} after {stop} tokens, so the mask (or the "
                f"rotary angles) treat a later token as position {value}; add the new tokens' count after each cached "
                "forward")
    if start > 0 and value == counter.forwards:
        return (f"the position counts forwards, not tokens: {what} is {value} before token {start}, after "
                f"{amount(counter.forwards, 'cached forward')} of {counted(start)}, so the mask (or the rotary angles) "
                f"treat token {start} as position {value}; add the new tokens' count (x.shape[1]), not 1, after each "
                "cached forward")
    times = value // start if start > 0 and value % start == 0 else 0
    if times > 1 and counter.after - value == times * (stop - start):  # every forward adds its tokens' count k times
        return (f"the position counts each token {'twice' if times == 2 else f'{times} times'}: {what} is {value} "
                f"after {counted(start)}, where it should be {start}, and moves by {counter.after - value} for "
                f"{counted(stop - start)}, so the step treats token {start} as position {value} — add the new tokens' "
                "count (x.shape[1]) once per cached forward")
    if not mask_shows:
        return None
    return (f"the position is wrong: {what} is {value} before token {start}, and the step's mask treats token {start} "
            f"as position {value}; it must count the tokens fed so far ({start})")


def _held_cause(module: nn.Module, reset, sequence: torch.Tensor, stop: int) -> str | None:
    """Words for a cache that holds fewer tokens than ``stop`` — for a module that declares a window W, fewer than the
    W − 1 the next step needs beside its own (a rolling cache keeps W − 1 or W: more is the step's to show,
    :func:`_step_cause`) — or more than ``stop``: its tensors' size now ÷ what one token adds (a second token's size
    less the first's); None when they hold ``stop``, or as many as the window needs, or it cannot tell."""
    window = declared_window(module)
    found = _found_cache(module, reset, sequence)
    if found is None:  # these forwards ran before without raising; the cause stays unnamed
        return None
    held, fed, _ = found
    sizes = [{name: shape.numel() for name, shape in shapes.items()} for shapes in fed]
    for name, value in held.items():
        size = value.numel()
        first, second = sizes[0].get(name), sizes[1].get(name)
        per_token = None if first is None or second is None else second - first
        if not per_token or per_token < 0 or size % per_token or first % per_token:
            continue  # a cache that does not grow by a whole token's size (a buffer allocated once): no count
        tokens = size // per_token
        if window is not None and tokens < min(stop, window - 1):
            return (f"the cache keeps too little: {name} holds {counted(tokens)} after {stop}, where a window of W = "
                    f"{window} needs the last {window - 1} before the next token — keep the last W − 1 before "
                    "appending the new token (or the last W after it)")
        if window is None and tokens < stop:
            return (f"the cache keeps too little: {name} holds {counted(tokens)} after {stop} — every earlier token's "
                    "keys and values must stay")
        if tokens > stop:
            at_first = "" if first == per_token else f", and {counted(first // per_token)} after the first alone"
            return (f"the cache holds tokens more than once: {name} holds {counted(tokens)} after {stop}{at_first} — "
                    "add each forward's keys and values once")
    return None


MODULE_INTERNALS = frozenset(vars(nn.Module()))  # nn.Module's own bookkeeping (_parameters, _buffers, hooks …)


def _kept_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """path -> every tensor the module keeps: an attribute, a buffer, or one inside the containers an attribute holds
    (``kv[0]``, ``cache["k"]``, ``kv[1][0]``) or a cache object it keeps (:func:`_tensors_in`); never a parameter, and a
    tensor kept under two paths once."""
    kept: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in vars(module).items():
        if name not in MODULE_INTERNALS:
            kept.update(_tensors_in(name, value, seen))
    kept.update((name, buffer) for name, buffer in module.named_buffers() if id(buffer) not in seen)
    return {path: value for path, value in kept.items() if not isinstance(value, nn.Parameter)}


NESTING = 4  # how many containers deep a cache's tensors are looked for (a list of per-layer (k, v) tuples: 2)


def _tensors_in(name: str, value, seen: set[int] | None = None) -> dict[str, torch.Tensor]:
    """path -> ``value`` when it is a tensor, else the tensors inside it, up to :data:`NESTING` containers deep:
    a tuple's or list's items (``name[0]``, and per layer ``name[1][0]``), a dict's values (``name["k"]``), a Hugging
    Face cache object's layers' keys and values (``name.layers[0].keys``, or the older ``name.key_cache[0]``).  A
    tensor reached twice (``seen``: the ids of those found before) is kept under its first path only."""
    found: dict[str, torch.Tensor] = {}
    _collect_tensors(name, value, 0, found, set() if seen is None else seen)
    return found


def _collect_tensors(path: str, value, depth: int, found: dict[str, torch.Tensor], seen: set[int]) -> None:
    """Adds the tensors in ``value`` (:func:`_tensors_in`), ``depth`` containers below the attribute, to ``found``."""
    if isinstance(value, torch.Tensor):
        if id(value) not in seen:
            seen.add(id(value))
            found[path] = value
        return
    if depth >= NESTING:
        return
    if isinstance(value, tuple | list):
        items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f'{path}["{key}"]' if isinstance(key, str) else f"{path}[{key!r}]", item)
                 for key, item in value.items()]
    else:
        items = []
        layers = getattr(value, "layers", None)
        if isinstance(layers, list | tuple):
            items = [(f"{path}.layers[{index}].{part}", getattr(layer, part)) for index, layer in enumerate(layers)
                     for part in ("keys", "values") if isinstance(getattr(layer, part, None), torch.Tensor)]
        if not items:
            items = [(f"{path}.{part}[{index}]", item) for part in ("key_cache", "value_cache")
                     if isinstance(getattr(value, part, None), list)
                     for index, item in enumerate(getattr(value, part)) if isinstance(item, torch.Tensor)]
    for item_path, item in items:
        _collect_tensors(item_path, item, depth + 1, found, seen)


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter, which every in-place change moves on (None: an inference tensor keeps none)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _reset_changed(before: torch.Tensor, version: int | None, after: torch.Tensor | None) -> bool:
    """Whether the reset emptied or replaced a tensor the module kept, ``before`` (its version counter then:
    ``version``; None: ``before`` is a copy): gone, changed in place (the counter moved), or another tensor that
    differs from it."""
    if after is None or (version is not None and _version(before) != version):
        return True
    return after is not before and not _unchanged(before, after)


def _stand_in(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor of ``tensor``'s shape and dtype on the meta device: what it held, sized, without a copy of it."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")


def _unchanged(before: torch.Tensor | None, after: torch.Tensor | None) -> bool:
    """Both there, of one shape and dtype, and equal (NaN equal to NaN; a tensor without data, on the meta device,
    counts as unchanged: no evidence)."""
    if before is None or after is None or before.shape != after.shape or before.dtype != after.dtype:
        return False
    try:
        return torch.equal(before, after) or bool(before.is_floating_point() and torch.allclose(
            before, after, rtol=0.0, atol=0.0, equal_nan=True))
    except (RuntimeError, NotImplementedError):
        return True


def _found_cache(module: nn.Module, reset, sequence: torch.Tensor) \
        -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Size]], dict[str, str]] | None:
    """The module's cache, found by what it holds, as it is now (after the cached forwards so far: stand-ins of its
    tensors' shapes and dtypes, :func:`_stand_in`, as only their sizes are read), its tensors' shapes after
    ``reset()`` and ``sequence``'s first token fed with ``use_cache=True``, then after its second: what one token adds,
    and which of them are views into another's memory (:func:`_views`); None when one of the forwards raises.  It
    copies only what the reset emptied, after one token: a tensor the reset leaves is told by its version counter
    (:func:`_reset_changed`), not by a copy.

    The cache is every tensor the module keeps (:func:`_kept_tensors`, by its path: ``k``, ``kv[0]``, ``cache["k"]``)
    that holds the tokens: one that grows from the first token to the second, whether the reset emptied it or not (a
    reset that empties ``k_cache`` alone, of a forward that starts ``v_cache`` afresh with it), or one the reset
    empties or replaces (it differs after the reset from now) that holds what a token brought (fed first after a
    reset, the second token leaves it otherwise than the first does).  A weight, a mask or rotary table no forward
    changes, and a step counter (the same whichever token came first) are not the cache."""
    kept = _kept_tensors(module)
    versions = {path: _version(value) for path, value in kept.items()}
    now = {path: value if versions[path] is not None else value.clone() for path, value in kept.items()}
    with torch.no_grad():
        try:
            reset()
            emptied = _kept_tensors(module)
            reset_changed = {path for path, value in now.items()
                             if _reset_changed(value, versions[path], emptied.get(path))}
            sizes = {path: _stand_in(value) for path, value in now.items()}
            views = _views(now)
            del kept, now, emptied  # the sequence's cache is not held longer than the module holds it
            tracing.run_forward(module, sequence[:, 1:2], use_cache=True)  # another token first
            other = {path: value.detach().clone() for path, value in _kept_tensors(module).items()
                     if path in reset_changed}  # the one copy: what the reset emptied, after another first token
            reset()
            tracing.run_forward(module, sequence[:, 0:1], use_cache=True)
            first = _kept_tensors(module)
            brought = {path for path in reset_changed if path in first
                       and not _unchanged(first[path], other.get(path))}
            fed = [{path: value.shape for path, value in first.items() if path in sizes}]
            del first, other
            tracing.run_forward(module, sequence[:, 1:2], use_cache=True)
            fed.append({path: value.shape for path, value in _kept_tensors(module).items() if path in sizes})
        except tracing.TraceError:
            return None
    cache = {path: size for path, size in sizes.items() if path in fed[0] and path in fed[1]
             and (fed[1][path].numel() > fed[0][path].numel() or path in brought)}
    return (cache, [{path: shapes[path] for path in cache} for shapes in fed],
            {path: whole for path, whole in views.items() if path in cache and whole in cache})


def _views(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """path -> the path of another of ``tensors`` whose memory holds all of this one's (``self.k = self.kv[0]`` beside
    ``self.kv``): a view, its elements counted once, in the tensor it views.  Of two over the same bytes, the first
    path holds the second; a tensor without data (the meta device) views nothing."""
    spans = [(path, _span(tensor)) for path, tensor in tensors.items()]
    views = {}
    for index, (path, (storage, low, high)) in enumerate(spans):
        views.update((path, other) for other_index, (other, (other_storage, other_low, other_high)) in enumerate(spans)
                     if path not in views and storage is not None and other_storage == storage
                     and other_low <= low and high <= other_high
                     and ((other_low, other_high) != (low, high) or other_index < index))
    return {path: _whole(path, views) for path in views}


def _whole(path: str, views: dict[str, str]) -> str:
    """The tensor at the end of ``path``'s chain of views: a view of a view counts in the tensor both view."""
    seen = {path}
    while path in views and views[path] not in seen:
        path = views[path]
        seen.add(path)
    return path


def _span(tensor: torch.Tensor) -> tuple[int | None, int, int]:
    """(the address of the tensor's storage, the first byte of it the tensor reads, one past its last); a storage of
    None for a tensor without data (the meta device) or without elements."""
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return None, 0, 0
    low = tensor.data_ptr()  # the first element's byte (strides are never negative in torch)
    reach = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))  # elements past the first
    return tensor.untyped_storage().data_ptr(), low, low + (reach + 1) * tensor.element_size()


@dataclass(frozen=True)
class _CacheHeld:
    """What a module's cache tensors hold after a sequence: their shapes and sizes, and — from the dimension of each
    that grows by one when a second token is fed — the tokens they hold and what one token takes."""

    shapes: dict[str, tuple[int, ...]]  # every cache tensor's shape after the sequence (batch 1)
    elements: int  # all of them together
    bytes: int
    tokens: dict[str, int]  # the tensors that grow by a token: how many tokens each holds
    grown: dict[str, int]  # and the dimension each grows along
    per_token: int  # elements a token takes in those tensors together (0: none grows), a view's counted in its base
    per_token_bytes: int
    views: dict[str, str] = field(default_factory=dict)  # a tensor that views another's memory -> that one

    def words(self) -> str:
        """ "8 tokens of 64 elements (256 bytes) each: cache_k (1, 8, 4, 8), cache_v (1, 8, 4, 8)"; for a cache that
        does not grow, its size.  A view is named with the tensor it views: "k (1, 4, 8, 8) in kv"."""
        shapes = ", ".join(f"{name} ({', '.join(map(str, shape))})" + (f" in {self.views[name]}" if name in self.views
                                                                      else "") for name, shape in self.shapes.items())
        if not self.tokens:
            return (f"{shapes}: {self.elements:,} {plural(self.elements, 'element')} ({self.bytes:,} "
                    f"{plural(self.bytes, 'byte')}), no more than after the first token")
        return (f"{counted(max(self.tokens.values()))} of {self.per_token:,} elements ({self.per_token_bytes:,} bytes) "
                f"each: {shapes}")


def _cache_held(module: nn.Module, reset, sequence: torch.Tensor) -> _CacheHeld | None:
    """What the module's cache (:func:`_found_cache`) holds now, after ``sequence``'s cached forwards; None when it
    keeps no tensor that holds the tokens, or the forwards that find it raise."""
    found = _found_cache(module, reset, sequence)
    return None if found is None or not found[0] else _held(*found)


def _held(now: dict[str, torch.Tensor], fed: list[dict[str, torch.Size]],
          views: dict[str, str] | None = None) -> _CacheHeld:
    """What the cache tensors ``now`` hold, their tokens counted along the one dimension of each that grows by one
    from the first token (``fed[0]``, their shapes then) to the second (``fed[1]``); memory two of them share counted
    once: a view (``views``, else :func:`_views` of ``now``) adds no elements or bytes to the tensor it views."""
    views = _views(now) if views is None else views
    shapes = [{name: tuple(shape) for name, shape in fed_shapes.items()} for fed_shapes in fed]
    tokens, grown_along, per_token, per_token_bytes = {}, {}, 0, 0
    for name, value in now.items():
        first, second = shapes[0].get(name), shapes[1].get(name)
        if first is None or second is None or not len(first) == len(second) == value.dim():
            continue
        grown = [dim for dim, (a, b) in enumerate(zip(first, second)) if a != b]
        if len(grown) != 1 or second[grown[0]] - first[grown[0]] != 1 or value.shape[grown[0]] == 0:
            continue
        tokens[name], grown_along[name] = value.shape[grown[0]], grown[0]
        if name not in views:
            per_token += value.numel() // tokens[name]
            per_token_bytes += value.numel() // tokens[name] * value.element_size()
    counted_once = [value for name, value in now.items() if name not in views]
    return _CacheHeld({name: tuple(value.shape) for name, value in now.items()},
                      sum(v.numel() for v in counted_once), sum(v.numel() * v.element_size() for v in counted_once),
                      tokens, grown_along, per_token, per_token_bytes, dict(views))


def _cache_excess(module: nn.Module, held: _CacheHeld, n: int, sizes: Mapping[str, int] | None = None, *,
                  window: bool = True) -> str | None:
    """Words for a cache that shows, after n tokens, the known waste of the variant the module declares (its own
    attributes in any spelling of :func:`declared_size`, else ``sizes``: the sizes it was built with, and the heads
    and head_dim its uncached trace measured — :func:`_sizes`), its outputs right; None when it shows none — then
    the PASS line says what the cache holds and names no cause.  The evidence, one kind per variant:

    * ``sliding_window_size`` W: a tensor holding more than W tokens along the dimension that grows
      (:func:`_over_window`; not read with ``window=False``: a cache object attnviz supplied keeps what it keeps);
    * ``num_kv_groups`` fewer than ``num_heads``: K/V tensors (batch, a head dimension, tokens, head_dim in any
      order) whose head dimension is ``num_heads`` — the heads repeated before caching;
    * ``latent_dim`` below d_out: tensors of d_out elements per token each, or 2 × d_out per token together — full K
      and V cached beside (or instead of) the latent.

    Anything else a cache keeps (a rotary key, its tokens' positions) is no evidence of waste.  A wrapper that declares
    no variant is read through the one submodule that does (:func:`_declaring`)."""
    module = _declaring(module)
    sizes = dict(sizes or {})

    def size(setting: str) -> int | None:
        return declared_size(module, setting) or sizes.get(setting)

    over = _over_window(module, held, sizes) if window else None
    if over is not None:
        longest, window = over
        return (f"the cache keeps more than the window needs: {longest} holds {counted(held.tokens[longest])} after "
                f"{n}, and a window of W = {window} needs only the last {window} — drop "
                "the older keys and values after each forward (keep the last W)")
    per_token = {name: math.prod(shape) // held.tokens[name] for name, shape in held.shapes.items()
                 if name in held.tokens}  # name -> elements one token takes in it
    groups, heads, head_dim = size("num_kv_groups"), size("num_heads"), _head_dim(module) or sizes.get("head_dim")
    if groups is not None and heads is not None and head_dim is not None and groups < heads:
        repeated = [name for name, shape in held.shapes.items() if name in held.tokens and len(shape) == 4
                    and shape[-1] == head_dim and held.grown[name] not in (0, 3)
                    and shape[3 - held.grown[name]] == heads]  # (b, h, n, hd) or (b, n, h, hd) with h = num_heads
        if repeated:
            size = sum(per_token[name] for name in repeated)
            return (f"{' and '.join(repeated)} {'hold' if len(repeated) > 1 else 'holds'} num_heads = {heads} heads "
                    f"where num_kv_groups = {groups} K/V heads are declared ({size} elements per token, where "
                    f"{groups} K/V heads need {size * groups // heads}) — cache the keys and values before "
                    "repeat_interleave, and repeat them after reading the cache")
    latent, d_out = size("latent_dim"), _d_out(module) or sizes.get("d_out")
    if latent is not None and d_out is not None and latent < d_out and per_token:
        full = [name for name, size in per_token.items() if size == d_out]  # a whole K or V per token
        total = sum(size for name, size in per_token.items() if name not in held.views)
        if full or total >= 2 * d_out:
            names = full or list(per_token)
            verb = "hold" if len(names) > 1 else "holds"
            held_words = (f"{d_out} elements per token{' each' if len(full) > 1 else ''}, d_out = {d_out}" if full
                          else f"{total} elements per token, 2 × d_out = {2 * d_out} or more")
            return (f"{' and '.join(names)} {verb} {held_words}: full keys and values where latent_dim = {latent} is "
                    "declared — cache the latent (the down-projection's output) and compute K and V from it at each "
                    "step")
    return None


def _over_window(module: nn.Module, held: _CacheHeld, sizes: Mapping[str, int] | None = None) -> tuple[str, int] | None:
    """(the tensor holding the most tokens, the window W) when it holds more than W — the window the module, or its
    submodules, declare (:func:`declared_window`), else ``sizes``'; None otherwise."""
    window = declared_window(module) or dict(sizes or {}).get("sliding_window_size")
    longest = max(held.tokens, key=held.tokens.get, default=None)
    if window is None or longest is None or held.tokens[longest] <= window:
        return None
    return longest, window


def _sizes(given: Mapping[str, int] | None, attention: tracing.Attention) -> dict[str, int]:
    """The module's sizes by attnviz setting for :func:`_cache_excess` where it keeps them under other names: those
    it was built with (``given``), else what its uncached trace measured — its query heads, head_dim and their
    product (d_out), and its K/V heads when they are fewer (a grouped-query module that broadcasts its K/V heads)."""
    sizes = {}
    if attention.queries is not None and attention.keys is not None:
        heads, head_dim, kv_heads = attention.weights.shape[1], attention.queries.shape[-1], attention.keys.shape[1]
        sizes = {"num_heads": heads, "head_dim": head_dim, "d_out": heads * head_dim}
        if 0 < kv_heads < heads:
            sizes["num_kv_groups"] = kv_heads
    sizes.update({setting: value for setting, value in (given or {}).items() if user_code.is_size(value)})
    return sizes


def _declaring(module: nn.Module) -> nn.Module:
    """The module whose attributes declare its attention's variant (``num_kv_groups``, ``latent_dim`` or
    ``sliding_window_size``, in any spelling): itself when it declares one, else the one submodule that does (a
    wrapper of transformers' ``FalconAttention``, which keeps ``num_heads`` and ``num_kv_heads``); itself when none or
    several do."""
    def declares(child: nn.Module) -> bool:
        return any(declared_size(child, setting) is not None for setting in user_code.VARIANT_SETTINGS)

    if declares(module):
        return module
    declaring = [child for _, child in module.named_modules() if declares(child)]
    return declaring[0] if len(declaring) == 1 else module


def _d_out(module: nn.Module) -> int | None:
    """The module's d_out (any spelling), else num_heads × head_dim (None: it keeps neither)."""
    d_out, heads, head_dim = declared_size(module, "d_out"), declared_size(module, "num_heads"), _head_dim(module)
    return d_out if d_out is not None else None if heads is None or head_dim is None else heads * head_dim


def _head_dim(module: nn.Module) -> int | None:
    """The module's head_dim attribute, else its d_out ÷ num_heads (None: it keeps neither)."""
    head_dim = getattr(module, "head_dim", None)
    if user_code.is_size(head_dim):
        return head_dim
    d_out, heads = declared_size(module, "d_out"), declared_size(module, "num_heads")
    return d_out // heads if d_out is not None and heads is not None and d_out % heads == 0 else None


def _step_cause(module: nn.Module, sequence: torch.Tensor, start: int, stop: int, rerun: Callable[[], dict],
                counter: _Counter | None = None) -> str | None:
    """What the cached step over tokens ``start`` … ``stop - 1`` shows, recorded again (``rerun()`` runs the forwards
    before it and gives its keyword arguments) beside the whole sequence's uncached forward: how many keys it attends
    over (more than the tokens fed: all-zero keys are slots never written, else tokens held twice; more than a
    declared window W lets a query see: a rolling cache one token too long), where its mask puts its first token,
    and which of its queries, keys or values differ from the whole sequence's; None when that names no cause."""
    try:
        whole = tracing.combine(tracing.record(module, sequence).attentions)[0]
        _, step = tracing.step_attention(module, sequence[:, start:stop], **rerun())
    except (tracing.TraceError, time_limit.UserCallError):
        return None
    if step is None:
        return None
    keys = step.weights.shape[-1]
    empty = 0 if step.keys is None else int((step.keys == 0).flatten(0, 1).all(0).all(-1).sum())  # all-zero keys
    if keys > stop and empty and keys - empty == stop:
        return (f"the step attends over {amount(keys, 'key')} after {counted(stop)}, and {empty} of them "
                f"{'is' if empty == 1 else 'are'} all zeros: cache slots no token was written to — the position it "
                "reads the cache up to runs ahead of the tokens fed; it must count them")
    if keys > stop:
        return (f"the step attends over {counted(keys)} after {stop}: the cache holds tokens more than once — add "
                "each forward's keys and values once")
    window = declared_window(module)
    seen = int((~step.hidden_cells()).sum(-1).max()) if window is not None else 0  # the most keys a query sees
    if window is not None and seen > window:
        extra = "one token" if seen == window + 1 else f"{seen - window} tokens"
        return (f"the step attends over {amount(seen, 'key')} where a window of W = {window} allows {window}: the "
                f"cache keeps {extra} too many — keep the last W − 1 = {window - 1} before appending the new token "
                f"(or the last W = {window} after it)")
    if window is not None and keys < min(stop, window):
        return (f"the step attends over only {amount(keys, 'key')} where a window of W = {window} needs "
                f"{min(stop, window)}: the cache keeps too little — keep the last W − 1 = {window - 1} before "
                f"appending the new token (or the last W = {window} after it)")
    if window is None and keys < stop:
        return (f"the step attends over only {counted(keys)} after {stop}: the cache keeps too little — every earlier "
                "token's keys and values must stay")
    offset = _mask_offset(step.hidden_cells()[0].all(0)) if window is None and keys == stop else None
    if offset is not None and not offset[0] <= start <= offset[1]:
        return _offset_cause(offset, start, stop, keys, counter, is_causal=bool(step.is_causal))
    rolling = window is not None and keys < stop  # a rolling window cache: the step's keys are the last ``keys``
    if (keys != stop and not rolling) or whole.weights.shape[1] != step.weights.shape[1]:
        return None
    compared = [(stage, getattr(step, stage), getattr(whole, stage)) for stage in ("queries", "keys", "values")]
    rows, held = slice(start, stop), slice(stop - keys, stop)
    for stage, mine, theirs in compared:
        if mine is None or theirs is None:
            continue
        theirs = theirs[:, :, rows] if stage == "queries" else theirs[:, :, held]  # (1, h, q or k, hd)
        if mine.shape != theirs.shape:
            continue
        moved = (mine.float() - theirs.float()).abs().amax(dim=(0, 1, 3))  # (q or k,): the worst per token
        if moved.max() <= TOLERANCE:
            continue
        first = int(moved.argmax()) + (start if stage == "queries" else held.start)
        words = _head_order_cause(stage, mine, theirs) if stage != "queries" else None
        if words is None and stage != "values" and (counter is None or counter.before == start):
            words = _rotary_cause(module, stage, mine, theirs, start, keys - (stop - start))
        if words is not None:
            return words
        if stage == "queries":
            return (f"the step hides the right keys, but its query for token {first} differs from the whole "
                    f"sequence's by {moved.max().item():.3g}, from the same input: what it takes from its position "
                    f"(rotary angles, a position embedding) is computed for another position — give token {first} "
                    f"position {first} (the tokens already cached plus its index in the step)")
        which = "keys" if stage == "keys" else "values"
        return (f"the step hides the right keys, but the cached {which} of token {first} differ from the whole "
                f"sequence's by {moved.max().item():.3g}: the cache must hold each token's {which} as the whole "
                "sequence computes them")
    return None


def _head_order_cause(stage: str, mine: torch.Tensor, theirs: torch.Tensor) -> str | None:
    """Words for a step whose keys or values (1, H, k, hd) are the whole sequence's K/V heads repeated in the other
    order: for some number g of K/V heads that divides H, ``.repeat`` gives head h K/V head h mod g, and
    ``repeat_interleave`` K/V head h ÷ (H/g); None when no such reordering gives the step's heads."""
    heads = theirs.shape[1]
    which = "keys" if stage == "keys" else "values"
    for groups in range(2, heads):
        if heads % groups:
            continue
        size = heads // groups  # query heads per K/V head
        as_repeat = [(head % groups) * size for head in range(heads)]  # the whole's interleaved heads, repeated
        as_interleave = [head // size for head in range(heads)]  # the whole's repeated heads, interleaved
        for order, mine_uses, theirs_uses in ((as_repeat, ".repeat (K1, K2, K1, K2)",
                                               "repeat_interleave (K1, K1, K2, K2)"),
                                              (as_interleave, "repeat_interleave (K1, K1, K2, K2)",
                                               ".repeat (K1, K2, K1, K2)")):
            if torch.allclose(mine.float(), theirs[:, order].float(), atol=TOLERANCE, rtol=0):
                return (f"the step hides the right keys, but its {which} are the whole sequence's K/V heads in another "
                        f"order: the cached step repeats them with {mine_uses}, the whole sequence with "
                        f"{theirs_uses} — use repeat_interleave(group_size, dim=1) on both")
    return None


def _rotary_cause(module: nn.Module, stage: str, mine: torch.Tensor, theirs: torch.Tensor, start: int,
                  cached: int | None = None) -> str | None:
    """Words for a rotary module's step whose queries or cached keys (1, h, q or k, hd) have the whole sequence's
    lengths but other directions — what a rotation by the wrong position's angle does (it keeps a vector's length);
    None when the module is not rotary or a length differs.  ``cached``: the keys the cache held before the step —
    queries turned as if at that position, where a rolling window keeps fewer than ``start``, are named so."""
    differs = (mine.float() - theirs.float()).abs().amax(dim=-1) > TOLERANCE  # (1, h, tokens)
    mine_lengths, theirs_lengths = mine.float().norm(dim=-1), theirs.float().norm(dim=-1)  # (1, h, tokens) each
    if not _rotary(module) or not torch.allclose(mine_lengths[differs], theirs_lengths[differs], rtol=1e-4,
                                                 atol=TOLERANCE):
        return None
    first = int(differs.any(dim=1)[0].nonzero()[0]) + (start if stage == "queries" else 0)
    turned = "the same length, another direction"
    window = declared_window(module)
    if stage == "queries" and cached is not None and window is not None and cached < start \
            and _turned_by(mine[..., :1, :], theirs[..., :1, :], cached - start):
        return (f"the step hides the right keys, but its query for token {start} is the whole sequence's turned by "
                f"another angle ({turned}): rotated at position {cached}, the number of keys the cache holds (a "
                f"rolling window of W = {window} keeps at most W − 1 = {window - 1}), not the token's position {start} "
                "— the rotary position offset is the cache's length, capped at W − 1; take it from a count of the "
                "tokens fed so far (a position counter the window does not cap)")
    if stage == "queries":
        return (f"the step hides the right keys, but its query for token {first} is the whole sequence's turned by "
                f"another angle ({turned}): the new queries and keys are rotated at the wrong position — rotate them "
                f"at offset start_pos = {start} (the tokens already cached)")
    return (f"the step hides the right keys, but the cached key of token {first} is the whole sequence's turned by "
            f"another angle ({turned}): the keys are rotated at the wrong positions — rotate only the new keys, at "
            "offset start_pos (the tokens already cached), and cache them rotated")


def _turned_by(mine: torch.Tensor, theirs: torch.Tensor, shift: int) -> bool:
    """Whether ``mine`` (…, hd) is ``theirs`` turned by ``shift`` positions in rotary's first pair, whose angle is one
    radian a position in every layout (rotate_half's dims 0 and hd/2, or interleaved 0 and 1), either sense."""
    half = theirs.shape[-1] // 2
    for second in (half, 1):
        x, y = theirs[..., 0].double(), theirs[..., second].double()
        for angle in (shift, -shift):
            cos, sin = math.cos(angle), math.sin(angle)
            if torch.allclose(mine[..., 0].double(), x * cos - y * sin, atol=1e-4) and \
                    torch.allclose(mine[..., second].double(), x * sin + y * cos, atol=1e-4):
                return True
    return False


def _mask_offset(hidden: torch.Tensor) -> tuple[int, float] | None:
    """Where a step's causal mask puts its first query, from its hidden cells (q, k): the (lowest, highest) position
    p such that query i sees exactly keys 0 … p + i (highest ∞ when no row hides a key); None when the hidden cells
    are not such a triangle."""
    low, high = -1, math.inf
    for row, hidden_row in enumerate(hidden.tolist()):
        seen = hidden_row.index(True) if True in hidden_row else len(hidden_row)  # the visible keys: a prefix
        if any(not cell for cell in hidden_row[seen:]):
            return None
        if seen < len(hidden_row):
            low, high = max(low, seen - 1 - row), min(high, seen - 1 - row)
        else:
            low = max(low, seen - 1 - row)
    return (low, high) if low <= high else None


def _offset_cause(offset: tuple[int, float], start: int, stop: int, keys: int, counter: _Counter | None, *,
                  is_causal: bool = False) -> str:
    """Words for a step whose mask puts its first token at ``offset`` (lowest, highest), not at ``start``;
    ``is_causal``: the mask is an SDPA call's ``is_causal=True``, which aligns it to the top-left."""
    low, high = offset
    where = f"position {low}" if low == high else f"position {low} or later"
    if counter is not None and low <= counter.before <= high:
        words = _counter_cause(counter, start, stop, counter.before)
        if words is not None:
            return words
    seen = (f"hides nothing (token {start} sees the tokens after it)" if high == math.inf else
            f"lets token {start} see no key" if low < 0 else f"lets token {start} see keys 0 … {low}")
    positions = f"{start}" if stop - start == 1 else f"{start} … {stop - 1}"
    if counter is not None and counter.after != counter.before and low <= counter.after <= high:
        return (f"the mask is sliced after the position is advanced: this step's mask {seen}, as the rows from "
                f"{counter.name} = {counter.after} (its value after the step) do; slice the mask at the position "
                f"before the step ({counter.before}), then add the new tokens' count")
    if is_causal and low <= 0 <= high and start > 0:
        last = "" if stop - start == 1 else f", query {stop - 1} keys 0 … {stop - 1 - start}"
        return (f"the mask is is_causal=True, which SDPA aligns to the top-left: over the {keys} keys the cache holds "
                f"query {start} sees key 0 only{last}, as if the step started at position 0 — is_causal fits only a "
                f"forward whose queries and keys are the same tokens; after a cache pass an explicit attn_mask whose "
                f"rows start at the cached tokens' count (query {start} sees keys 0 … {start}), or offset the mask by "
                "it")
    if low <= 0 <= high and start > 0:
        return (f"the mask is built for the new tokens alone: it treats token {start} as position 0, so it sees only "
                f"key 0 of the {keys} the cache holds; take the mask's rows from the position the step starts at "
                f"({positions}) and as many columns as the cache holds")
    return (f"the step's mask treats token {start} as {where}: it {seen}; the mask's rows must start at the position "
            f"the step starts at ({positions})")


def _concat_fed_onwards(recording, attention, shape) -> torch.Tensor | None:
    """The heads' concatenated context as the module passed it on: the first Linear input, else the output, of the
    concatenation's shape that the module computed from this attention's contexts alone (a reshape, a transpose, a
    concatenation of the heads — or a mistake made there); None when there is none (a residual x + context, V
    projected after the softmax: then the rule compares the recorded context itself)."""
    wanted = frozenset(attention.context_ops)
    for _, tensor, sources in recording.fed_onwards:
        if sources == wanted and tuple(tensor.shape) == tuple(shape):
            return tensor
    return None


def _compare(rule: str, actual: torch.Tensor, expected: torch.Tensor, what: str, equals: str = "equals", *,
             tolerance: float = TOLERANCE) -> Check:
    """``what`` (its verb ``equals``: "equal" after a plural) passes within ``tolerance`` of ``expected``, else fails
    naming the largest difference and where it is."""
    actual = actual.float().reshape(expected.shape)
    difference = (actual - expected).abs()  # NaN stays NaN
    worst = difference.nan_to_num(nan=math.inf).max().item()
    if worst <= tolerance:
        return Check(rule, "pass", f"{what} {equals} softmax(mask(QKᵀ/√d_head))·V from its own Q, K, V "
                                   f"(largest difference {worst:.1g})")
    index = tuple(int(i) for i in (difference.nan_to_num(nan=math.inf) == worst).nonzero()[0])
    return Check(rule, "fail", f"{what} ≠ softmax(mask(QKᵀ/√d_head))·V from its own Q, K, V: off by {worst:.3g} "
                               f"at index {index} (module {actual[index].item():.4g}, reference "
                               f"{expected[index].item():.4g})")


def _require_finite_output(output: torch.Tensor, attention: tracing.Attention) -> None:
    """TraceError when the output holds NaN or ±∞ at a query whose attention weights are all finite: the rules
    compare outputs, and NaN hides every change, so a NaN made after the attention would pass them all.  (NaN
    weights — a row whose every key is hidden — are the rules' to name.)"""
    weights_finite = torch.isfinite(attention.weights).all(-1).all(1)  # (b, nq): every head's row finite
    output_bad = ~torch.isfinite(output).all(-1)  # (b, n)
    if output_bad.shape != weights_finite.shape:
        return
    bad = output_bad & weights_finite
    if bad.any():
        item, position = (int(i) for i in bad.nonzero()[0])
        raise tracing.TraceError(
            f"the output holds NaN or ∞ at {int(bad.sum())} of {bad.numel()} positions (first: item {item}, position "
            f"{position}) while the attention weights there are finite: the NaN comes after the attention (the output "
            "projection, or what follows it), and the rules cannot compare NaN outputs")


def _weightless(module: nn.Module) -> bool:
    return not any(True for _ in module.parameters())


def _output(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The module's output for ``x`` (a forward that raises is a TraceError)."""
    output = tracing.run_forward(module, x)
    return tracing.first_tensor(output).detach()
