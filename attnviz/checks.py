"""Checks any attention module by rule: the Pitfall lab's knowledge turned on the user's own code.

``check_module(module, x)`` traces the module (:mod:`attnviz.tracing`) and runs nine rules, each with a stable
id, a status (``pass``, ``fail``, or ``skip`` when it does not apply) and evidence in a learner's words —
which cell, which value, what it should be:

* ``rows-sum-to-one`` — every row of every map that has a visible key sums to 1, as the weights multiply V:
  - a softmax over the wrong dimension normalises columns, or each cell across the heads or the batch;
  - ``softmax(s) / √d`` shrinks every row;
  - a softmax in float16 or bfloat16 rounds them, named so — not SDPA's on float16 or bfloat16 inputs, which runs
    in float32.
* ``causal`` — changing the tokens from position j on changes no output before j:
  - skipped for 1 token (nothing comes after it), and for a module that is not causal: the evidence says who said
    so — ``causal=False`` given, the module's ``causal`` attribute, or no mask hiding the future — and
    ``mask-convention`` fails a module that masks anyway;
  - a failure says who said the module is causal when it hides nothing (an ``is_causal`` attribute: the flag masks
    nothing by itself), or, when its weights hide the future, where the leak is: in the weights, in V, after
    ``weights @ V``, or in heads split with a view and no transpose.
* ``mask-convention`` — the hidden cells are exactly the future, or the future and the keys W or more behind:
  - a sliding window of W is as wide as the module's own ``sliding_window_size`` says; a window the module declares
    must show once the tokens reach a key W behind, and one they never reach is traced again on W + 2 tokens, up to
    ``LONGEST_WINDOW_CHECK``;
  - a ``window_size`` that is the KV cache's length, the book's optimized class's, is no attention window
    (:func:`attnviz.window_reading.cache_length`) — unless the code says it is one (:func:`window_said`), which a
    window never applied names;
  - it fails an inverted mask, one that hides the past instead of the future, or a shifted diagonal; a fix names
    the module's own ``tril``/``triu`` call or mask buffer when one of them is the mask;
  - skipped for 1 token that hides nothing: there is no future.
* ``scaling`` — the softmax's input is QKᵀ/√d_head (not unscaled, not ÷√d_out, not ÷d_head), however the module
  applies the scale (to the scores, to q or k before the product or an SDPA call):
  - d_head is the width of QKᵀ (of scores that are the sum of two products of one width, that width), or for MLA
    with W_UK absorbed into the queries (scores over the latent, its decoupled rotary scores perhaps added) the
    per-head width the module declares;
  - a scale the module's config declares as its design (:func:`declared_scales`: Gemma's
    ``query_pre_attn_scalar``, DeepSeek's YaRN mscale²) passes, named — and a module that ignores it, dividing by
    √d_head anyway, fails, naming both;
  - a wrong one the module keeps itself (``self.scaling``) is named.
* ``rotary-placement`` — rotary turns the queries and keys only, by head_dim's frequencies: every score depends
  only on i − j and no value turns by its position (:mod:`attnviz.rotary_rule`).
* ``dropout-placement`` — dropout acts on the weights after the softmax in training mode, not at all in eval mode:
  - read from the dropout's own call: a mask after the softmax before it is the other rules' finding;
  - while it acts in eval mode, a failure of a rule that compares forwards (``COMPARES_OUTPUTS``) is a skip that
    says so.
* ``batch-independence`` — one item's output does not move when another item of the batch changes; a failure names
  an ``nn.MultiheadAttention`` built without ``batch_first=True`` when setting it for one forward stops the mixing
  (with as many items as tokens no shape shows it).
* ``matches-reference`` — the heads' concatenated context equals softmax(mask(QKᵀ/√d_head))·V computed from the
  module's own recorded Q, K, V:
  - float32, ≤ 1e-5; Q, K and V the module gave in float16 or bfloat16 — SDPA on ``q.bfloat16()`` — to that
    dtype's eps × the largest |V|, said so;
  - K and V as the module used them (after a grouped-query repeat, after rotary), masked as ``mask-convention``
    found (causal, or a sliding window), scaled by the config's design where ``scaling`` passes one (a difference
    the module's own scale alone explains is named so, not as another cause);
  - no two query heads share keys (equal K) but not values while two share values but not keys (K repeated with
    ``repeat_interleave`` and V with ``.repeat``, or the reverse: it names a query head and the K/V heads it reads
    its keys and its values from); K and V both repeated with ``.repeat`` pass, with a note that checkpoints of
    Hugging Face's and Llama's GQA models expect ``repeat_interleave``'s order;
  - the concatenation is what the module feeds a Linear, or returns, when it computed that from its
    ``weights @ V`` alone; else (a residual ``x + context``, V projected after the softmax) the rule compares the
    recorded ``weights @ V``.
* ``kv-cache`` — for a forward that takes ``use_cache`` or a cache the caller holds (``past_key_values`` …): fed as a
  prefill then token by token, the last two in one forward, the cached outputs equal the uncached ones, and the cache
  holds no more than the variant the module declares needs (:mod:`attnviz.kv_cache_rule`).

Around the rules:

* ``rows-sum-to-one``, ``mask-convention``, ``scaling`` and ``matches-reference`` read every attention the forward
  computed (a model's layers, :func:`_in_every_attention`), ``dropout-placement`` the first whose dropout acts in eval
  mode (:func:`_dropout_in_each`): a failure names the attention and its line, "attention 2 of 2 on line 30: …"; each of
  several attentions is held to the window of the layer that computed it (:func:`_layer_windows`); ``causal`` looks
  for a leak's cause in each, in order, naming the one it is in (:func:`_leak_causes`);
* an uncached forward that writes to a cache the module keeps (:func:`attnviz.kv_cache_rule.uncached_appends`)
  fails ``kv-cache``; the rules that run the module again (``RUN_AGAIN``) skip, as each of their forwards would
  attend to the ones before, and the rules that read the traced forward stand;
* an output that holds NaN or ∞ (:func:`not_finite_output`) — NaN equals nothing, so no change to it can be seen —
  is never passed by the rules that compare outputs (``causal``, ``batch-independence``, ``kv-cache``): they say they
  could not check it, where it is NaN and where the forward first made a value that is not finite, a skip pointing to
  the rule that fails for the NaN weights, or a fail when that rule is not run;
* every rule but ``dropout-placement`` runs the module in eval mode; the module's own mode is restored after;
* a forward that raises, or computes no attention, raises ``tracing.TraceError`` with one line.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from attnviz import kv_cache_rule, time_limit, tracing
from attnviz.declarations import (
    HEAD_DIM_NAMES,
    NUMBER_OF,
    SETTING_OF,
    SPELLINGS,
    DeclaredCap,
    DeclaredScale,
    DeclaredSinks,
    declared_scales,
    declared_sinks,
    declared_softcap,
    held_objects,
    is_size,
    layer_windows,
)
from attnviz.kv_cache_rule import AttentionLayer, cache_sizes, kept_state, kv_cache, uncached_appends
from attnviz.rotary_rule import rotary_placement, rotary_tokens, uses_rotary
from attnviz.rule_base import (
    TOLERANCE,
    Check,
    NotFinite,
    layers_computing,
    lowest_precision,
    module_output,
    op_line,
    per_query_head,
)
from attnviz.softcap_sinks_rule import SINK_WORDS, sinks_mismatch, softcap_mismatch, unread_softcap
from attnviz.tokens import counted
from attnviz.trace import ScoreWidth, attention_named, hidden_by_mask
from attnviz.tracing import score_width
from attnviz.window_reading import attention_window, cache_length_reading, window_said
from attnviz.words import amount, name_words, window_sees

RULES = ("rows-sum-to-one", "causal", "mask-convention", "scaling", "rotary-placement", "dropout-placement",
         "batch-independence", "matches-reference", "kv-cache")
ROW_SUM_TOLERANCE = 1e-4  # a row of float32 weights sums to 1 within this: each of its n terms rounds
SLOW_CHECK_SECONDS = 5.0  # a check expected to take longer says so early (the CLI on stderr, the app in its status)
REFERENCE = "softmax(mask(QKᵀ/√d_head))·V"  # matches-reference's words for its reference
UNSCALED_REFERENCE = "softmax(mask(QKᵀ))·V"  # … for the unscaled one of a module without weights (the book's 3.3)
PACED_FORWARDS = 3  # the time left is estimated once this many of the rules' forwards are timed (one is a noisy guess)


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
    paced_forwards: int = 0  # the rules' forwards timed so far: each from its start to the next one's or its rule's end
    paced_seconds: float = 0.0  # their seconds, the rule's own work between them included

    @property
    def pace(self) -> float | None:
        """Seconds per forward of the rules (its rule's work included), None before ``PACED_FORWARDS`` are timed.  The
        traced forward is left out: it records every tensor the module computes, many times a plain forward's work on
        long inputs."""
        return self.paced_seconds / self.paced_forwards if self.paced_forwards >= PACED_FORWARDS else None

    @property
    def seconds_left(self) -> float | None:
        """Roughly: the planned forwards still to run at :attr:`pace` (0 once they have run; None before the pace is
        known)."""
        left = self.forwards_planned - self.forwards
        if self.forwards and left <= 0:
            return 0.0
        return None if self.pace is None else left * self.pace

    def slow_notice(self, forward: str = "one forward", *, threshold: float | None = None,
                    tenths_below: float = 0.0) -> str | None:
        """Once the pace is known, when the whole check will take ``threshold`` seconds or more (default
        ``SLOW_CHECK_SECONDS``): "<forward> takes 1.1 s after the traced one and the rules run up to 11 forwards:
        about 12 s in all"; else None.  ``tenths_below``: see :func:`duration`."""
        left = self.seconds_left
        if left is None or self.pace is None or self.seconds + left < (
                SLOW_CHECK_SECONDS if threshold is None else threshold):
            return None
        return (f"{forward} takes {self.pace:.2g} s after the traced one and the rules run up to "
                f"{self.forwards_planned} forwards: about {duration(self.seconds + left, tenths_below=tenths_below)} "
                "in all")


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
                 sizes: Mapping[str, float] | None = None) -> list[Check]:
    """The nine rules' verdicts on ``module`` (``x``: (batch, n, d_in), or text embedded as ``trace_module``
    embeds it; None: a seeded (2, 8, d_in)).  A float16 or bfloat16 module is a TraceError: the rules' tolerances are
    float32's.  ``rules``: only these rule ids (in ``RULES`` order); ``progress``: called as the check runs
    (:class:`Progress`); ``sizes``: the sizes the module was built with, by attnviz setting (``num_heads``,
    ``num_kv_groups``, ``latent_dim``, ``d_out`` …: ``attnviz check``'s flags), read where the module keeps them under
    names attnviz does not know, and the numbers it was built with that it may keep nowhere (``rope_base``,
    ``softcap``: its constructor's ``rope_theta``, ``attn_logit_softcapping`` …).  A rule whose own code raises on
    what the module gave it is a skip that says so (:func:`_not_read`), or, with the environment variable
    ``ATTNVIZ_RAISE_RULE_ERRORS=1`` (the tests), the error."""
    selected = _selected(rules)
    sizes = _given_sizes(sizes)
    module = tracing.as_module(module)
    causal = tracing.yes_no_causal(causal)
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
        kept = kept_state(module)
        with tracing.saying_width(x, width):
            recording = tracing.record(module, x)
        each = tracing.each_attention(recording)  # a model's layers; a wrapper's one-head softmaxes stacked as one
        attention = each[0]
        _require_finite_output(recording.output, recording.attentions)
        not_finite = not_finite_output(recording, module, selected)  # the outputs cannot be compared
        random = any(_dropout_acts(one) for one in each)  # in eval mode: two forwards of the same input differ
        traced = meter.forwards
        appended = uncached_appends(module, x, recording.output, kept,  # every forward after it would read it
                                     random=random)
        told = meter.forwards - traced  # the forwards that told whether the trace wrote to a cache: 0 to 2
        causal_said = _causal_said_by(module, attention, causal)
        unmasked = _unmasked(module, causal_said)
        triangles = _triangles(recording, module)
        if causal is None:
            causal = tracing.infer_causal(recording, attention, module) or _capped_mask(attention)
        meter.planned = _planned_forwards(module, x, selected, causal) + told
        weightless = _weightless(module)
        cap = declared_softcap(module, sizes.get("softcap"))
        sinks_for = functools.cache(functools.partial(declared_sinks, module))  # by the number of heads
        scale_reading = functools.cache(  # by the attention's index: scaling and matches-reference both read it
            lambda index: _scale_reading(module, each[index]))
        own_file = tracing.class_file(module)
        longer = functools.cache(functools.partial(_traced_each, module, x))  # one forward on W + 2 for every layer
        context = functools.cache(functools.partial(tracing.module_context, module))  # read once, when needed
        window_reads = functools.cache(_window_reads)  # per layer, once for all its attentions
        declares_itself = functools.cache(lambda: "" in layer_windows(module))

        def mask_convention_of(index: int, one: tracing.Attention, longer_too: bool = False) -> Check:
            """mask-convention on the forward's attention ``one``; ``longer_too``: with the longer forwards and the
            context that show a window past the traced tokens."""
            more = {"longer": lambda n: _nth(longer(n), index), "context": context()} if longer_too else {}
            return _causal_hint(mask_convention(
                one, causal, causal_said=causal_said, unmasked=unmasked, triangles=triangles,
                **_layer_windows(module, recording, one, alone=len(each) == 1, reads=window_reads,
                                 declares_itself=declares_itself),
                fill=_finite_fill(recording, module, one), **more), one)

        run = {
            "rows-sum-to-one": lambda: _in_every_attention(
                "rows-sum-to-one", lambda index, one: rows_sum_to_one(one), each, recording, own_file),
            "causal": lambda: causal_rule(module, x, recording.output, causal, causal_said, attention=attention,
                                          unmasked=unmasked, not_finite=not_finite, attentions=each,
                                          named=lambda index: _attention_named(recording, each[index], index,
                                                                               len(each), own_file)),
            "mask-convention": lambda: _in_every_attention("mask-convention", functools.partial(
                mask_convention_of, longer_too=True), each, recording, own_file),
            "scaling": lambda: _in_every_attention("scaling", lambda index, one: scaling(
                one, weightless=weightless, **scale_reading(index)), each, recording, own_file),
            "rotary-placement": lambda: rotary_placement(module, x, built_base=sizes.get("rope_base")),
            "dropout-placement": lambda: _in_mode_handed_over(module, was_training,
                                                              lambda: _dropout_in_each(module, x, each, recording,
                                                                                       own_file)),
            "batch-independence": lambda: batch_independence(module, x, recording.output, not_finite=not_finite),
            "matches-reference": lambda: (
                not_finite.verdict("matches-reference") if not_finite is not None and not_finite.inputs else  # Q, K, V
                _in_every_attention("matches-reference", lambda index, one: matches_reference(
                    recording, one, causal, scaled=not (weightless and applies_no_scale(one)),  # the book's 3.3
                    window=sliding_window(one) if causal else None, causal_said=causal_said,
                    **scale_reading(index), cap=cap, sinks=sinks_for(one.weights.shape[1]),
                    fill=_finite_fill(recording, module, one), own_file=own_file),
                    each, recording, own_file)),
            "kv-cache": lambda: kv_cache(module, x, causal, sizes=cache_sizes(sizes, attention),
                                         not_finite=not_finite,
                                         layers=_attention_layers(module, recording, each, own_file, sizes)),
        }
        if appended is not None:  # the traced forward came first, on what the module held: only its verdicts stand
            run.update({rule: functools.partial(Check, rule, "skip", APPENDED_SKIP) for rule in RUN_AGAIN})
            run["mask-convention"] = lambda: _in_every_attention("mask-convention", mask_convention_of, each,
                                                                 recording, own_file)
            run["kv-cache"] = lambda: Check("kv-cache", "fail", appended)
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


def _traced_each(module: nn.Module, x: torch.Tensor, n: int) -> list[tracing.Attention] | None:
    """The module's attentions on a seeded (1, n, d_in) input as wide as ``x``, one per layer as
    :func:`attnviz.tracing.each_attention` reads them; None when n is past the context the module says it has, or the
    forward raises on it."""
    context = tracing.module_context(module)
    if context is not None and n > context[0]:
        return None
    generator = torch.Generator().manual_seed(3)
    longer = torch.randn(1, n, x.shape[-1], generator=generator).to(device=x.device, dtype=x.dtype)  # (1, n, d_in)
    try:
        recording = tracing.record(module, longer)
    except tracing.TraceError:
        return None
    return tracing.each_attention(recording)


def _nth(attentions: list[tracing.Attention] | None, index: int) -> tracing.Attention | None:
    return attentions[index] if attentions is not None and index < len(attentions) else None


def _attention_named(recording: tracing.Recording, attention: tracing.Attention, index: int, total: int,
                     own_file: str | None) -> str:
    """"attention 2 of 3 on line 30": which of a model's attentions, and the line of its softmax (or SDPA call), as
    the Trace of it names it (:attr:`attnviz.trace.ModuleRun.attention_named`)."""
    (place,) = tracing.attention_places(recording, [attention], own_file)
    return attention_named(index + 1, total, place)


def _attention_layers(module: nn.Module, recording: tracing.Recording, attentions: list[tracing.Attention],
                      own_file: str | None, given: Mapping[str, float]) -> list[AttentionLayer]:
    """kv-cache's reading of a model's attentions, one per layer (:class:`attnviz.kv_cache_rule.AttentionLayer`): each
    named as the other rules name it ("attention 2 of 2 on line 30"), with the submodule that computes it
    (:func:`attnviz.rule_base.layers_computing`: the one whose class's forward, else another method of it, holds its
    line, or, of several layers of that class, the one in the place this attention has among those that line
    computed) and its sizes (:func:`cache_sizes`:
    ``given``, else its own trace's); [] for a forward's only attention, which is the module's."""
    if len(attentions) < 2:
        return []
    paths = {id(value): path for path, value in held_objects(module).items() if isinstance(value, nn.Module)}
    lines = [op_line(recording, attention) for attention in attentions]
    layers = []
    for index, attention in enumerate(attentions):
        computing = layers_computing(module, recording, attention)
        same_line = [other for other, line in zip(attentions, lines) if line is not None and line == lines[index]]
        place = next((at for at, other in enumerate(same_line) if other is attention), None)
        owner = (computing[0] if len(computing) == 1 else
                 computing[place] if place is not None and len(computing) == len(same_line) else None)
        layers.append(AttentionLayer(_attention_named(recording, attention, index, len(attentions), own_file), owner,
                                     None if owner is None else paths.get(id(owner)), cache_sizes(given, attention)))
    return layers


def _in_every_attention(rule: str, verdict: Callable[[int, tracing.Attention], Check],
                        attentions: list[tracing.Attention], recording: tracing.Recording,
                        own_file: str | None) -> Check:
    """``rule``'s verdict on every attention of the forward (``verdict(index, attention)``, in order, up to the first
    that fails): one attention's as it is; of several, the first failure, named "attention 2 of 2 on line 30: …", else
    the first attention's skip when the rule checked none, else the first it did not check, named, else a pass that
    holds for each of them (its words once when they are the same, else each attention's named)."""
    if len(attentions) == 1:
        return verdict(0, attentions[0])
    total = len(attentions)
    found = []
    for index, attention in enumerate(attentions):
        check = verdict(index, attention)
        if check.status == "fail":
            return Check(rule, "fail", f"{_attention_named(recording, attention, index, total, own_file)}: "
                                       f"{check.evidence}")
        found.append(check)
    if all(check.status == "skip" for check in found):
        return found[0]
    skipped = next((index for index, check in enumerate(found) if check.status == "skip"), None)
    if skipped is not None:  # what holds for the others is not known of this one: the rule did not check it
        return Check(rule, "skip", f"{_attention_named(recording, attentions[skipped], skipped, total, own_file)}: "
                                   f"{found[skipped].evidence}")
    if all(check == found[0] for check in found):
        return Check(rule, "pass", f"{found[0].evidence} — in each of the {total} attentions")
    return Check(rule, "pass", "; ".join(f"{_attention_named(recording, attention, index, total, own_file)}: "
                                         f"{check.evidence}" for index, (attention, check)
                                         in enumerate(zip(attentions, found))))


def _scale_reading(module: nn.Module, attention: tracing.Attention) -> dict:
    """The ``width`` and ``declared`` scales scaling and matches-reference judge ``attention`` by, read off its own
    scores (:func:`score_width`)."""
    own = score_width(module, attention)
    return {"width": own, "declared": declared_scales(module, own.head_dim)}


def _window_reads(owner: nn.Module) -> dict:
    """What ``owner`` declares of its window, as mask-convention reads it: ``declared``, ``cache_length`` and
    ``window_named`` (:func:`mask_convention`)."""
    return {"declared": attention_window(owner), "cache_length": cache_length_reading(owner),
            "window_named": window_said(owner)}


def _layer_windows(module: nn.Module, recording: tracing.Recording, attention: tracing.Attention, *,
                   alone: bool, reads: Callable[[nn.Module], dict], declares_itself: Callable[[], bool]) -> dict:
    """mask-convention's reading of the window ``attention`` is held to (:func:`_window_reads`, ``reads``: the same,
    read once per module by the caller).  The forward's only attention (``alone``), or one of a model that declares a
    window itself (its own attribute or config: ``declares_itself()``), is held to what the module declares; one of
    several to what the layers that computed it declare (:func:`attnviz.rule_base.layers_computing`: in their class's
    forward, or an ``attend`` or ``_attn`` method of it) when they all declare the same — a full layer that keeps no
    window beside a window layer of another class is held to none, and so is a layer class whose layers keep
    different windows (its hidden cells say which) —, else to what the module declares."""
    owners = [] if alone or declares_itself() else layers_computing(module, recording, attention)
    said = [reads(owner) for owner in owners or [module]]
    return {name: said[0][name] if all(one[name] == said[0][name] for one in said) else None for name in said[0]}


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
    if not isinstance(rules, str | Iterable):
        raise ValueError(f"rules must be rule ids ({', '.join(RULES)}), or None for every rule, got "
                         f"{type(rules).__name__}")
    wanted = [rules] if isinstance(rules, str) else list(rules)
    unknown = [rule for rule in wanted if rule not in RULES]
    if unknown:
        raise ValueError(f"no rule {unknown[0]!r}: the rules are {', '.join(RULES)}")
    return [rule for rule in RULES if rule in wanted]


SIZES_READ = ("num_heads", "num_kv_groups", "head_dim", "d_out", "latent_dim", "sliding_window_size")  # kv-cache's


def _given_sizes(sizes: Mapping[str, float] | None) -> dict[str, float]:
    """``check_module``'s ``sizes`` by attnviz setting: a constructor's spelling of one (``n_kv_heads``,
    ``num_key_value_heads`` → ``num_kv_groups``: :data:`attnviz.declarations.SPELLINGS`) read as the setting, and the
    sizes ``attnviz check`` passes that no rule reads (``d_in``, ``context_length`` …) taken, and the numbers other than
    sizes a module is built with (:data:`attnviz.declarations.NUMBER_SETTINGS`: ``rope_base`` — ``rope_theta``,
    ``base`` … — for rotary-placement, ``softcap`` — ``attn_logit_softcapping`` … — for matches-reference); ValueError
    naming a name that is none of them, and the sizes the rules read (:data:`SIZES_READ`), a size read that is not a
    positive whole number, or such a number that is not positive."""
    by_name = {**SETTING_OF, **{setting: setting for setting in [*SPELLINGS, "head_dim"]}, **NUMBER_OF}
    read = ", ".join(f"{setting} ({', '.join(SPELLINGS[setting][1:3])} …)"
                     if len(SPELLINGS.get(setting, ())) > 1 else setting for setting in SIZES_READ)
    if sizes is not None and not isinstance(sizes, Mapping):
        raise ValueError(f"sizes must be a dict of the sizes the module was built with ({{\"num_heads\": 8, …}}), or "
                         f"None, got {type(sizes).__name__}")
    given = {}
    for name, value in (sizes or {}).items():
        setting = by_name.get(name)
        if setting is None:
            raise ValueError(f"no size {name!r}: the sizes the kv-cache rule reads are {read}, and the numbers "
                             "rotary-placement and matches-reference read, rope_base and softcap")
        if setting in SIZES_READ and not is_size(value):
            raise ValueError(f"sizes[{name!r}] is {value!r}: a size is a positive whole number")
        if setting in NUMBER_OF.values() and (isinstance(value, bool) or not isinstance(value, int | float)
                                              or value <= 0):
            raise ValueError(f"sizes[{name!r}] is {value!r}: a {setting} is a positive number")
        if given.get(setting, value) != value:
            raise ValueError(f"sizes give {setting} twice, {given[setting]!r} and {value!r} ({name!r})")
        given[setting] = value
    return given


def _planned_forwards(module: nn.Module, x: torch.Tensor, rules: list[str], causal: bool) -> int:
    """How many forwards of the module a check of ``rules`` on ``x`` runs at most: the traced one, then causal's one
    per position after the first, mask-convention's one on more tokens for a declared window they do not reach,
    rotary-placement's one on one token repeated (for a rotary module), dropout-placement's one in training mode,
    batch-independence's one per item, and kv-cache's (:func:`attnviz.kv_cache_rule.planned_forwards`).
    That is a passing check's count: a failing rule runs fewer of its own, and its diagnosis up to
    :func:`_diagnosis_forwards` more."""
    batch, n = x.shape[:2]
    window = attention_window(module)
    longer = causal and window is not None and n <= window <= LONGEST_WINDOW_CHECK - 2
    per_rule = {"causal": n - 1 if causal else 0, "mask-convention": int(longer),
                "rotary-placement": int(uses_rotary(module) and rotary_tokens(module, x) > 1),
                "dropout-placement": 1, "batch-independence": batch,
                "kv-cache": kv_cache_rule.planned_forwards(module, n)}
    return 1 + sum(per_rule.get(rule, 0) for rule in rules)


def _diagnosis_forwards(module: nn.Module, x: torch.Tensor, rules: list[str]) -> int:
    """How many forwards beyond the plan (:func:`_planned_forwards`, a passing check's) a failure's diagnosis may run
    at most: causal's one recording of the changed input (where the leak is), batch-independence's two with
    ``batch_first=True`` set, and kv-cache's (:func:`attnviz.kv_cache_rule.diagnosis_forwards`).
    A rule that fails skips its later forwards, so a check usually runs fewer."""
    per_rule = {"causal": 1, "batch-independence": 2,
                "kv-cache": kv_cache_rule.diagnosis_forwards(module, x.shape[1])}
    return sum(per_rule.get(rule, 0) for rule in rules)


class _Meter:
    """Counts the module's forwards (a forward pre-hook), times the rules' forwards for the pace (each from its start
    to the next forward's start in the same rule or the rule's end: the forward and the rule's own work around it;
    not the traced forward, nor the ones before the first rule) and hands the progress callback a ``Progress``."""

    def __init__(self, callback: Callable[[Progress], None] | None, rules_total: int, planned: int):
        self.callback, self.rules_total, self.planned = callback, rules_total, planned
        self.rule: str | None = None
        self.rules_done = self.forwards = self.paced_forwards = 0
        self.paced_seconds = 0.0
        self.timing: float | None = None  # when the rule's forward being timed started
        self.started = time.perf_counter()

    def report(self, now: float, check: Check | None = None) -> None:
        if self.callback is not None:
            with time_limit.own_code():  # inside the user's forward (a pre-hook): its stop is not the user's exception
                self.callback(Progress(self.rule, self.rules_done, self.rules_total, self.forwards,
                                       max(self.planned, self.forwards), now - self.started, check,
                                       self.paced_forwards, self.paced_seconds))

    def before_forward(self, module, args) -> None:
        now = time.perf_counter()
        self._timed(now)
        self.report(now)
        self.forwards += 1
        self.timing = now if self.rule is not None else None

    def done(self, check: Check) -> None:
        now = time.perf_counter()
        self._timed(now)
        self.rules_done += 1
        self.report(now, check)

    def _timed(self, now: float) -> None:
        """The forward being timed, if any, ends at ``now``: it joins the pace."""
        if self.timing is not None:
            self.paced_forwards += 1
            self.paced_seconds += now - self.timing
            self.timing = None


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


def _blind_rows(rows: torch.Tensor, sums: torch.Tensor) -> str:
    """Words for the rows a pass leaves out — those whose every key the mask hides (``rows`` False), which no sum
    can judge — naming what their weights are and the rule that judges them; "" when there are none."""
    blind = ~rows  # (b, h, nq)
    if not blind.any():
        return ""
    count, nan = int(blind.sum()), bool(torch.isnan(sums[blind]).any())
    are = "are NaN (a softmax of 0/0)" if nan else "sum to " + _sum_words(sums[blind][0].item())
    row = "row hides" if count == 1 else "rows hide"
    return f"; {count} {row} every key, and their weights {are}: mask-convention judges that"


def rows_sum_to_one(attention: tracing.Attention) -> Check:
    rule = "rows-sum-to-one"
    weights = attention.weights.float() * attention.weights_scale  # (b, h, nq, nk): what multiplies V
    if attention.zeroed_after is not None:  # a mask after the softmax zeroed these weights on their way to V
        weights = weights.masked_fill(attention.zeroed_after, 0.0)  # (b, h, nq, nk)
    visible = ~attention.masked_cells()  # (b, h, nq, nk)
    rows = visible.any(-1)  # (b, h, nq): rows with at least one visible key
    sums = weights.sum(-1)  # (b, h, nq)
    sink = ""
    if attention.sink_weights is not None:  # the rest of each row went to the sink: the rows sum to 1 with it
        sums = sums + attention.sink_weights.float()[..., 0] * attention.weights_scale  # (b, h, nq)
        shortest = (1 - weights.sum(-1))[rows].max().item() if rows.any() else 0.0
        sink = (f" with the sink's weight — {SINK_WORDS}: the weights alone sum to less than 1 by design (by up to "
                f"{shortest:.3g})")
    bad = rows & ~sums_to_one(sums)  # (b, h, nq)
    if not bad.any():
        left = _blind_rows(rows, sums)
        return Check(rule, "pass", f"all {int(rows.sum())} rows with a visible key sum to 1{sink}{left}")
    item, head, row = (int(i) for i in bad.nonzero()[0])
    where = (f"item {item}, " if item else "") + (f"head {head}, " if weights.shape[1] > 1 else "")
    value = _sum_words(sums[item, head, row].item())
    hint = (" — the softmax ran over dim=-2 (the queries), so columns sum to 1: use dim=-1 (the keys)"
            if attention.softmax_dim != -1 else "")
    if attention.softmax_over:
        hint = f" — {_across(attention)}"
    if attention.zeroed_after is not None:
        return Check(rule, "fail", f"{where}row {row} of the weights that multiply V sums to {value}, should be "
                                   f"1{hint} — {MASK_AFTER_SOFTMAX}")
    if not math.isclose(attention.weights_scale, 1.0, rel_tol=1e-6):
        return Check(rule, "fail", f"{where}row {row} of the weights that multiply V sums to {value}, should be "
                                   f"1{hint} — the weights are {_times(attention.weights_scale)} after the softmax: "
                                   "scale the scores before the softmax, not the weights after it")
    low = _low_precision(attention)
    return Check(rule, "fail", f"{where}row {row} sums to {value}{sink}, should be 1{hint}"
                 + (f" — {low}" if low else ""))


def _across(attention: tracing.Attention) -> str:
    """Words for a softmax over the heads or the batch (:attr:`tracing.Attention.softmax_over`), what it does to the
    cells the mask hides, and its fix."""
    size = attention.softmax_over_size
    return (f"{attention.softmax_over}: each cell's weights sum to 1 over that dimension, not each query's over the "
            f"keys, and a cell the mask hides in all {size} gets weight 1/{size}, not 0 (NaN where the fill is −∞: "
            "0/0) — use dim=-1 (the keys)")


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


def _causal_said_by(module: nn.Module, attention: tracing.Attention, causal: bool | None) -> str | None:
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


def _unmasked(module: nn.Module, causal_said: str | None) -> str | None:
    """Why a module said to be causal may hide no cell, when an ``is_causal`` attribute said so: the flag masks
    nothing by itself — a Hugging Face layer's eager attention masks only through the attention_mask its model
    builds; None for any other statement (then the rules' own words say it)."""
    flag = tracing.causal_flag(module)
    if flag is None or causal_said != _flag_words(flag):
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
                causal_said: str | None = None, *, attention: tracing.Attention | None = None,
                unmasked: str | None = None, not_finite: NotFinite | None = None,
                attentions: list[tracing.Attention] | None = None, named: Callable[[int], str] | None = None) -> Check:
    """``causal_said``: who said whether the module is causal (:func:`_causal_said_by`); None: its mask says.
    ``attention``: the traced attention, whose hidden cells say where a leak is (:func:`_leak_cause`); ``attentions``:
    every attention of the forward, a model's layers, read in order for it instead, a leak's named by ``named(index)``
    (:func:`_leak_causes`);
    ``unmasked``: why a module said to be causal may hide nothing (:func:`_unmasked`); ``not_finite``: why its
    output, not finite, cannot be compared (:func:`not_finite_output`), the verdict of a module the rule applies to."""
    rule = "causal"
    n = x.shape[1]
    if n == 1:
        return Check(rule, "skip", "1 token: nothing after it to change — check 2 or more tokens")
    if not causal:
        return Check(rule, "skip", f"not checked: {causal_said}" if causal_said else
                     "the module is not causal (no mask hides the future)" + (
                         f" — yet its name, {type(module).__name__}, says causal: to check it as causal, give "
                         "attnviz check --causal (check_module's causal=True)" if _named_causal(module) else ""))
    if not_finite is not None:
        return not_finite.verdict(rule)
    generator = torch.Generator().manual_seed(1)
    for j in range(1, n):
        changed = x.clone()  # (b, n, d_in)
        changed[:, j:] = torch.randn(changed[:, j:].shape, generator=generator).to(x.dtype)
        with torch.no_grad():
            moved = (module_output(module, changed)[:, :j] - output[:, :j]).abs()  # (b, j, d_out)
        if moved.max() > TOLERANCE:
            position = int(moved.amax(dim=(0, 2)).argmax())
            cause = (_leak_causes(module, changed, j, attentions, causal_said, unmasked, named)
                     if attentions is not None and named is not None and len(attentions) > 1 else
                     _leak_cause(module, changed, j, attention, causal_said, unmasked) if attention is not None else "")
            return Check(rule, "fail", f"changing tokens {j}… changed the output at position {position} by "
                                       f"{moved.max().item():.3g}: position {position} sees the future{cause}")
    js = "j = 1" if n == 2 else f"j = 1 … {n - 1}"
    return Check(rule, "pass", f"changing tokens j… moves no output before j ({js})")


def _named_causal(module: nn.Module) -> bool:
    """Whether the module's class name has the word "causal" (nanoGPT's CausalSelfAttention, the book's
    CausalAttention) and no word that negates it (NonCausal, Bidirectional)."""
    words = set(name_words(type(module).__name__))
    return "causal" in words and not words & {"non", "not", "bidirectional", "acausal"}


def _leak_cause(module: nn.Module, changed: torch.Tensor, j: int, attention: tracing.Attention,
                causal_said: str | None, unmasked: str | None, *,
                rerun_of: Callable[[], tracing.Attention | None] | None = None, before: str | None = None,
                last: bool = True) -> str:
    """Where the future leaks in, in words after a dash, when the traced attention tells: weights transposed after
    the softmax (``Attention.transposed_after``); no cell hidden although the module is said to be causal; or the
    weights hide every future key, so the module run again on ``changed`` (tokens j… changed) shows which stage of
    the queries before j moves first — their weights (a softmax over the queries, or Q and K), their context (V), or
    neither: then the leak comes after ``weights @ V`` (the heads put back together without transposing); ""
    otherwise.  For one of a model's attentions (:func:`_leak_causes`): ``rerun_of()``, this attention on ``changed``
    (None: unknown); ``before``, the attention before it, by name, whose weights and context before j did not move;
    not ``last``: "" where nothing of this attention moves (the leak is in a later one)."""
    hidden = attention.masked_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk)
    if attention.zeroed_after is not None:
        return (f" — {MASK_AFTER_SOFTMAX} (each weight is divided by a sum over every key, the future's "
                "included)")
    if attention.transposed_after is not None:
        return (f" — {attention.transposed_after} transposes the weights after the softmax (each column sums to 1, not "
                "each row), so position i mixes the values of the tokens that attend to it, the future's: multiply "
                "the weights by V as the softmax made them, (…, query, key)")
    if not hidden.any():
        if causal_said is None:
            return ""
        return f" — {causal_said}, yet no mask hides the future" + (f": {unmasked}" if unmasked else "")
    if not hidden[..., future].all():
        return ""  # a future key is visible: mask-convention names it
    empty = hidden[0, 0].all(-1).nonzero()  # (rows, 1): queries that hide every key, their own too
    if len(empty) and attention.weights[0, 0, int(empty[0])].isfinite().all():  # a finite fill: weight on every key
        return (f" — query {int(empty[0])} hides every key, itself included, and the fill is finite, so the softmax "
                "spreads its weight evenly over every key, the future's too (see mask-convention)")
    if rerun_of is None:
        try:
            rerun = tracing.combine(tracing.record(module, changed).attentions)
        except tracing.TraceError:
            return ""
    else:
        rerun = rerun_of()
    if rerun is None or rerun.weights.shape != attention.weights.shape:
        return ""
    hide = " — the mask hides the future"
    if attention.softmax_over:
        return f"{hide}, but {_across(attention)}"
    if attention.heads_split_by:
        return (f"{hide}, but the {attention.heads_split_by} splits a (…, n, d) tensor straight into (…, heads, n, "
                "head_dim), which gives each head's position the features of other tokens, later ones too: split "
                "with view(b, n, heads, head_dim), then transpose(1, 2)")
    if _moved_before(j, attention.weights, rerun.weights):
        if attention.softmax_dim != -1:
            return (f"{hide}, but the softmax ran over dim=-2 (the queries): each weight is divided by a sum over "
                    "every query, later ones included — use dim=-1 (the keys)")
        if before is not None:
            return (f"{hide}, yet the weights of the queries before position {j} move{_between(before, 'Q or K')}")
        return f"{hide}, yet the weights of the queries before position {j} move: their Q or K depend on later tokens"
    if attention.context is None or rerun.context is None or rerun.context.shape != attention.context.shape:
        return ""
    if _moved_before(j, attention.context, rerun.context):
        return (f"{hide} and the weights before position {j} do not move, yet each head's weights @ V there does"
                + (_between(before, "V") if before is not None else
                   ": the values of earlier tokens depend on later ones"))
    if not last:
        return ""
    return (f"{hide} and each head's weights @ V before position {j} does not move, so the leak comes after weights "
            "@ V: check how the heads are put back together (transpose(1, 2) before view)")


def _between(before: str, own: str) -> str:
    """A leak's words in a model's later attention whose ``own`` stage (Q or K, V) moves while nothing of the attention
    ``before`` it does: it comes in between."""
    return (f", while nothing of {before} before it does: the leak is between them — in how that attention's heads are "
            f"put back together (transpose(1, 2) before view), or in this attention's {own}")


def _leak_causes(module: nn.Module, changed: torch.Tensor, j: int, attentions: list[tracing.Attention],
                 causal_said: str | None, unmasked: str | None, named: Callable[[int], str]) -> str:
    """:func:`_leak_cause` for every attention of the forward, in order (a model's layers, ``named(index)``: "attention
    2 of 2 on line 30"): the first that tells where the leak is, named — the module run again on ``changed`` once, for
    all of them."""
    try:
        recording = tracing.record(module, changed)
        reruns = tracing.each_attention(recording)
    except tracing.TraceError:
        reruns = []
    for index, attention in enumerate(attentions):
        cause = _leak_cause(module, changed, j, attention, causal_said, unmasked,
                            rerun_of=lambda index=index: reruns[index] if len(reruns) == len(attentions) else None,
                            before=named(index - 1) if index else None, last=index == len(attentions) - 1)
        if cause:
            return f" — {named(index)}: {cause.removeprefix(' — ')}"
        hidden = attention.masked_cells()  # (b, h, nq, nk)
        nq, nk = hidden.shape[-2:]
        if not hidden[..., torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)].all():
            return ""  # this attention sees a future key (mask-convention names it): the attentions after it see it too
    return ""


def _moved_before(j: int, before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether the rows of the queries before ``j`` of (b, h, nq, m) maps moved by more than TOLERANCE (a NaN
    difference — a row with no visible key — counts as none)."""
    return (after[:, :, :j] - before[:, :, :j]).abs().nan_to_num(nan=0.0).max().item() > TOLERANCE


def mask_convention(attention: tracing.Attention, causal: bool, declared: int | None = None,
                    causal_said: str | None = None, *, unmasked: str | None = None,
                    triangles: tuple[Triangle, ...] | list[Triangle] = (),
                    longer: Callable[[int], tracing.Attention | None] | None = None,
                    context: tuple[int, str] | None = None, cache_length: tuple[str, int, str] | None = None,
                    fill: FiniteFill | None = None, window_named: str | None = None) -> Check:
    """``declared``: the module's own attention window (:func:`attention_window`), which the hidden cells must show when
    the tokens reach a key W behind; ``cache_length``: (the name, W, what its code does with it) of a window the module
    declares that is its KV cache's length (:func:`attnviz.window_reading.cache_length_reading`), which its hidden cells
    need not show (said in a pass); ``causal_said``: who said whether the module is causal (:func:`_causal_said_by`),
    None when its mask says; ``unmasked``: why a module said to be causal may hide nothing (:func:`_unmasked`);
    ``triangles``: the triangles the module made (:func:`_triangles`), so a fix names the one that is its mask;
    ``longer(n)``: the module's attention traced on n tokens (None when it cannot be), for a declared window too wide
    for the checked tokens (:func:`_window_on_more_tokens`), within the ``context`` the module says it has
    (:func:`attnviz.tracing.module_context`: c, and how attnviz knows); ``fill``: the module's own masked_fill that sets
    the future to a number that hides nothing (:func:`_finite_fill`), which a mask that hides no cell names;
    ``window_named``: what in the module's code says that its ``window_size``, read only where it caches, is an
    attention window and not the book's KV-cache length (:func:`attnviz.window_reading.window_said`), which a window
    never applied names."""
    rule = "mask-convention"
    hidden = attention.masked_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk): the cells after each query
    if nk == 1 and not hidden.any():  # a hidden 1 × 1 cell is still a token that hides itself
        return Check(rule, "skip", "1 token: no future to hide, and nothing is hidden — check 2 or more tokens")
    window = sliding_window(attention) if causal else None
    if window is not None and declared not in (None, window):
        return Check(rule, "fail", f"the hidden cells are the future and the keys {window} or more behind (a window "
                                   f"of {window}), but the module's window is {declared}: "
                                   + (_one_key_wide(declared) if window == declared + 1 else
                                      f"query i should see {window_sees(declared)}"))
    if window is not None:
        return Check(rule, "pass", f"sliding window W = {window}: the hidden cells are the future and the keys "
                                   f"{window} or more behind (query i sees {window_sees(window)})")
    if not causal:
        if not hidden.any():
            return Check(rule, "skip", f"{causal_said}, and the module hides no cell" if causal_said else
                         "the module is not causal and hides no cell")
        if not causal_said:
            where = _where(attention, hidden.nonzero()[0])
            return Check(rule, "fail", f"the module is not causal but hides {amount(int(hidden[0, 0].sum()), 'cell')}, "
                                       f"e.g. {where}")
        return Check(rule, "fail", f"{causal_said}, but the module masks: it hides "
                                   f"{_hidden_cells_words(attention, future)}")
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
            return Check(rule, "fail", _window_not_applied(nq, nk, declared, window_named))
        if declared is not None:
            return _window_on_more_tokens(declared, nk, longer, context, causal_said=causal_said, unmasked=unmasked,
                                          triangles=triangles, window_named=window_named)
        if cache_length is not None:
            return Check(rule, "pass", _cache_length_words(*cache_length))
        return Check(rule, "pass", "the hidden cells are exactly the future (above the diagonal)")
    first = hidden[0, 0]  # (nq, nk)
    if not hidden.any() and _capped_mask(attention):
        cap = f"{attention.softcap:g}"
        return Check(rule, "fail", "no cell is hidden: the soft-cap comes after the mask, and "
                                   f"{cap} · tanh(−∞ / {cap}) = −{cap}, so every future key keeps a score of "
                                   f"−{cap}, not −∞, and the softmax still gives it weight — cap the scores first, "
                                   "then mask them")
    if not hidden.any() and fill is not None:  # the mask is there and kept, but its number hides nothing
        return Check(rule, "fail", f"{f'{causal_said}, but ' if causal_said else ''}no cell is hidden: {fill}, "
                                   "not −∞, so the softmax still gives those keys weight — fill with float(\"-inf\") "
                                   "(or -torch.inf)")
    if not hidden.any():
        if causal_said and unmasked:
            return Check(rule, "fail", f"{causal_said}, yet no cell is hidden: {unmasked}")
        if causal_said:
            return Check(rule, "fail", f"{causal_said}, but no cell is hidden: {_no_mask_hint(attention)}")
        if attention.kind != "softmax":  # a call given no mask: its own words (is_causal, attn_mask)
            return Check(rule, "fail", f"no cell is hidden: {_no_mask_hint(attention)}")
        return Check(rule, "fail", "no cell is hidden: the causal mask never reached the scores "
                                   "(masked_fill returns a copy: keep it, or use masked_fill_)")
    fix = _triangle_fix(triangles, first)
    if nk > 1 and torch.equal(first, ~future):  # one token: hiding it is the hidden diagonal below
        if attention.float_mask:
            return Check(rule, "fail", "the mask is inverted: it hides the past and the token itself and shows the "
                                       f"future{_no_key_left(attention)}. {FLOAT_MASK[0].upper()}{FLOAT_MASK[1:]}")
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
            return Check(rule, "fail", f"{words} ({fix or 'hide exactly the keys after each query, j > i'})"
                                       + (_no_key_left(attention) if shift == 0 else ""))
    wrong = (hidden != future.expand_as(hidden)).nonzero()[0]
    state = "hidden" if hidden[tuple(wrong)] else "visible"
    should = "visible" if state == "hidden" else "hidden"
    return Check(rule, "fail", f"{_where(attention, wrong)} is {state}; it should be {should}")


CAUSAL_HINT = ("; and nn.MultiheadAttention was given is_causal=True and need_weights=False with this mask: is_causal "
               "only tells it that the mask is the causal one, and with need_weights=False its general path "
               "(training, or with gradients) then hides the future and ignores the mask while its fast path (eval "
               "mode without gradients) applies the mask, so the module attends one way in training and another in "
               "inference — give is_causal=True only with the causal mask, torch.triu(torch.ones(n, n, "
               "dtype=torch.bool), diagonal=1)")


def _causal_hint(check: Check, attention: tracing.Attention) -> Check:
    """mask-convention's ``check`` with :data:`CAUSAL_HINT` after it, a failure, when an ``nn.MultiheadAttention`` call
    was given ``is_causal=True`` and ``need_weights=False`` with an attn_mask whose hidden cells are not exactly the
    future — a sliding window's too (``Attention.mask_dropped_by_hint``): torch's two paths then compute different
    attentions.  With ``need_weights=True`` (its default) both apply the mask, and the mask is read as it is."""
    if attention.kind != "nn.MultiheadAttention" or not attention.mask_dropped_by_hint or check.status == "skip":
        return check
    hidden = attention.masked_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk)
    if torch.equal(hidden, future.expand_as(hidden)):
        return check
    return Check(check.rule, "fail", f"{check.evidence}{CAUSAL_HINT}")


def _one_key_wide(declared: int) -> str:
    """mask-convention's words for hidden cells that keep one key more than the module's window of ``declared``:
    the convention of Mistral's reference code (``torch.triu(mask, diagonal=-sliding_window)``), not attnviz's."""
    return (f"each query keeps W + 1 = {declared + 1} keys, itself and {declared} behind, the convention of Mistral's "
            "reference code (torch.triu(mask, diagonal=-sliding_window)); attnviz and Hugging Face count W keys, the "
            "query's own included: hide diff >= W, not diff > W")


def _cache_length_words(name: str, length: int, read: str) -> str:
    """mask-convention's pass for hidden cells that are exactly the future in a module whose ``name`` = ``length`` is
    its KV cache's length, not an attention window: the reading the check took, what in the code made it (``read``:
    :func:`attnviz.window_reading.cache_length_reading` — the code reads it only where the forward caches, or only a
    cache submodule keeps it, ``kv_cache.window_size``), and how to have it checked as a window instead."""
    return (f"the hidden cells are exactly the future; {name} = {length} is the length of the module's KV cache, not "
            f"an attention window: {read} (a window? name it sliding_window_size)")


LONGEST_WINDOW_CHECK = 66  # tokens: a declared window W ≥ the checked tokens is traced again on W + 2 up to this


def _window_not_applied(nq: int, nk: int, declared: int, window_named: str | None = None) -> str:
    """mask-convention's words for hidden cells that are exactly the future when the module declares a window of
    ``declared`` < ``nk`` keys: the last query and the keys it sees that the window hides; ``window_named``: what
    says that a ``window_size`` read only where the forward caches is an attention window (:func:`mask_convention`)."""
    position = nk - 1  # the last query's position
    far = position - declared  # the nearest key the window hides
    keys = f"key 0, {declared} behind it" if far == 0 else f"keys 0 … {far}, {declared} or more behind it"
    wide = (" (or it hides only the keys more than W behind: diff > W instead of diff >= W)"
            if far == 0 else "")
    return (f"the hidden cells are exactly the future, but the module's window is {declared}: query {position} sees "
            f"{keys}, which a window of {declared} hides (query i sees "
            f"{window_sees(declared)}) — the window is never applied{wide}: hide the keys W or more behind (diff >= W) "
            "as well as the future" + ("" if window_named is None else
                                       f" in the uncached forward too — its code reads window_size only where it "
                                       "caches, as the book's optimized MultiHeadAttention reads its KV cache's "
                                       f"length, but here it is an attention window: {window_named}"))


def _window_on_more_tokens(declared: int, nk: int, longer: Callable[[int], tracing.Attention | None] | None,
                           context: tuple[int, str] | None = None, **words) -> Check:
    """mask-convention for a module that declares a window of ``declared`` ≥ ``nk``, the checked tokens, which hide
    only the future: its attention traced again on W + 2 tokens (``longer``, when W + 2 ≤ LONGEST_WINDOW_CHECK), where
    the window — or one a key too wide — shows, and checked there; else a pass that says the window was not
    exercised, and that a window of LONGEST_WINDOW_CHECK − 2 or less is (Mistral's W = 4,096 is not worth 4,098
    tokens) — or, past the module's ``context`` (c, how attnviz knows), that no input it takes shows the window: a W
    ≥ c can hide nothing a causal mask does not (the book's optimized class's ``window_size``, c by default, is its
    KV cache's length, not an attention window)."""
    tokens = declared + 2
    attention = longer(tokens) if longer is not None and tokens <= LONGEST_WINDOW_CHECK else None
    future = "the hidden cells are exactly the future (above the diagonal)"
    if attention is None and context is not None and tokens > context[0]:
        limit, how = context
        if declared >= limit:
            return Check("mask-convention", "pass", f"{future}; the module's window of {declared} is not shorter than "
                                                    f"its context ({how}): no input it takes reaches a key {declared} "
                                                    "behind, so the window hides nothing the causal mask does not — "
                                                    "nothing to check (a window_size that sizes a KV cache, as the "
                                                    "book's optimized MultiHeadAttention's does, is a KV cache's "
                                                    "length, not an attention window)")
        return Check("mask-convention", "pass", f"{future}; the module's window of {declared} was not exercised: "
                                                f"{counted(nk)} never reach a key {declared} behind, and its context "
                                                f"({how}) takes no {tokens} — build it with a context of {tokens} or "
                                                "more to check the window")
    if attention is None or attention.weights.shape[-1] != tokens:
        return Check("mask-convention", "pass", f"{future}; the "
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


def _hidden_cells_words(attention: tracing.Attention, future: torch.Tensor) -> str:
    """The cells a module hides, in words: "the 28 cells above the diagonal (the future), e.g. …", a sliding
    window's, or "28 cells, e.g. …" (counted in the first item's first head)."""
    hidden = attention.masked_cells()  # (b, h, nq, nk)
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
    "nn.MultiheadAttention": "Pass torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1) (is_causal=True alone "
                             "is no mask to nn.MultiheadAttention: only a hint that attn_mask is this one): ",
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
    "nn.MultiheadAttention": "nn.MultiheadAttention's boolean attn_mask hides where it is True (a float one is added "
                             "to the scores)",
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
    own_file = tracing.class_file(module)
    found = []
    for index, name, diagonal in recording.triangles:
        op = recording.ops[index]
        if len(op.shape) < 2:
            continue
        found.append(Triangle(name, diagonal, line=tracing.op_place(op, own_file)))
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


def _capped_mask(attention: tracing.Attention) -> bool:
    """Whether the soft-cap comes after the causal mask: every score above the diagonal that reaches the softmax is
    −cap, cap · tanh(−∞ / cap), the −∞ a mask gave it capped (Gemma 2's cap applied after the mask is added)."""
    cap, masked = attention.softcap, attention.masked  # (b, h, nq, nk)
    nq, nk = masked.shape[-2:]
    future = torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq)  # (nq, nk)
    if cap is None or not future.any():
        return False
    return bool(((masked[..., future].float() + cap).abs() <= 1e-4 * cap).all())


@dataclass(frozen=True)
class FiniteFill:
    """The module's own ``masked_fill`` (or ``where``) before its softmax that sets the cells of a triangular mask to
    a number that hides nothing (:func:`_finite_fill`)."""

    value: float  # the number it sets: 0.0, -1.0 …
    future: bool  # its cells are the future (above the diagonal); False: some other triangle's
    call: str  # the call and its place: "masked_fill on line 47"

    def __str__(self) -> str:
        """In words: "the masked_fill on line 47 sets the future (above the diagonal) to 0.0"."""
        cells = "the future (above the diagonal)" if self.future else "the cells of its triangular mask"
        return f"the {self.call} sets {cells} to {self.value!r}"


def _finite_fill(recording: tracing.Recording, module: nn.Module, attention: tracing.Attention) -> FiniteFill | None:
    """The module's own ``masked_fill`` (or ``where``) before its softmax that sets the cells of a triangular mask to
    a number that hides nothing (0, not −∞: ``tracing.Recording.fills``); None when there is none."""
    keys = attention.masked.shape[-1]
    own_file = tracing.class_file(module)
    for index, value, future in recording.fills:
        if attention.op_index >= 0 and index > attention.op_index:  # after the softmax: zeroed_after says it
            continue
        if not math.isfinite(value) or bool(hidden_by_mask(torch.tensor(value), keys=keys)):  # −∞, −10⁹: it hides
            continue
        op = recording.ops[index]
        return FiniteFill(value, future, f"{op.name}{tracing.op_place(op, own_file)}")
    return None


def _finite_fill_words(fill: FiniteFill) -> str:
    """matches-reference's words for a module whose masked_fill sets the future to a finite number (``fill``:
    :func:`_finite_fill`), as mask-convention says it: the future's weights are not zero."""
    weight = "e⁰ = 1" if fill.value == 0 else "e to that number, above 0,"
    cells, reach = (("the future's", "reaches every key after the query") if fill.future else
                    ("the masked cells'", "still weighs them"))
    return (f"{cells} weights are not zero: {fill}, not −∞, before the softmax, so {weight} {reach}, which the "
            "reference hides — fill with float(\"-inf\") (or -torch.inf), as mask-convention says")


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
    empty = attention.masked_cells()[0, 0].all(-1).nonzero()  # (rows, 1): rows with no visible key
    if len(empty) == 0:
        return ""
    row = int(empty[0])
    if attention.weights[0, 0, row].isfinite().all():  # a finite fill (finfo.min): the row's scores are all alike
        return (f"; row {row} (query {row}) hides every key, and its fill is finite, so the softmax spreads that row "
                "evenly over every key, the future included")
    words = f"; row {row} (query {row}) hides every key, so its softmax is 0/0: NaN weights"
    if attention.kind == "sdpa" and attention.returned is not None:
        given = attention.returned[0, 0, row]  # (dv,): what SDPA returned for that query
        if not torch.isnan(given).any():
            words += " (SDPA returns " + ("zeros" if not given.any() else "finite values") + " there instead)"
    return words


def sliding_window(attention: tracing.Attention) -> int | None:
    """W when the hidden cells are exactly the future and the keys W or more behind each query (1 ≤ W < n_key),
    the same in every item and head; None otherwise (a plain causal mask is no window)."""
    hidden = attention.masked_cells()  # (b, h, nq, nk)
    nq, nk = hidden.shape[-2:]
    diff = (torch.arange(nq)[:, None] + nk - nq) - torch.arange(nk)[None, :]  # (nq, nk): how far back each key is
    for window in range(1, nk):
        if torch.equal(hidden, ((diff < 0) | (diff >= window)).expand_as(hidden)):
            return window
    return None


def applies_no_scale(attention: tracing.Attention) -> bool:
    """Whether the module multiplies its scores by nothing, before the softmax or after it (its scale read by the
    tracer: False when it could not be read)."""
    return (attention.scale is not None and math.isclose(attention.scale, 1.0, rel_tol=1e-6)
            and math.isclose(attention.weights_scale, 1.0, rel_tol=1e-6))


def _width_unknown(latent: int) -> str:
    return (f"Q·Kᵀ runs over the module's {latent}-wide latent (W_UK absorbed into the queries, as DeepSeek-V3's MLA "
            "computes it), so its width is not the head_dim the scale divides by, and the module keeps no per-head "
            f"width attnviz knows ({', '.join(HEAD_DIM_NAMES)}): keep it as self.qk_head_dim to have the scale checked")


def scaling(attention: tracing.Attention, *, weightless: bool = False, width: ScoreWidth | None = None,
            declared: tuple[DeclaredScale, ...] = ()) -> Check:
    """``width``: the head_dim to judge the scale against (:func:`score_width`; None: the width of Q·Kᵀ);
    ``declared``: the scales the module declares (:func:`declared_scales`): its config's design passes, named, and a
    module that applies another (the book's 1/√head_dim among them) fails, naming both; an attribute of its own that
    holds a wrong scale is named in the failure.  ``weightless``: a module without weights (q = k = v = x) that
    applies no scale is the book's simplified self-attention (3.3), unscaled by design — a skip that says so; one
    that divides by √head_dim passes as any module does, and one that applies another scale fails, naming both
    scales it may use."""
    rule = "scaling"
    if attention.scale is None or attention.queries is None:
        why = attention.unrecorded.get("scores")  # what hides Q @ Kᵀ: a tanh that is no soft-cap, an exp …
        return Check(rule, "skip", "the scale of the scores could not be identified" + (f" ({why})" if why else ""))
    if weightless and applies_no_scale(attention):
        found = width or score_width(None, attention)
        also = "" if found.head_dim is None else (f" — dividing them by √{found.name} = √{found.head_dim} ≈ "
                                                  f"{math.sqrt(found.head_dim):.3g} passes too")
        return Check(rule, "skip", "the scores are not scaled, as in the book's simplified self-attention (3.3), a "
                                   f"module without weights{also}; matches-reference's reference is unscaled, like "
                                   "the module's scores")
    check = _scaling(attention, width, declared)
    if weightless and check.status == "fail":
        check = Check(rule, "fail", f"{check.evidence} — or, for a module without weights, not at all, as the book's "
                                    "simplified self-attention (3.3)")
    if attention.softcap is None or check.status == "skip":
        return check
    return Check(rule, check.status, f"{check.evidence} — judged before the {softcap_words(attention.softcap)}")


def _scaling(attention: tracing.Attention, width: ScoreWidth | None, declared: tuple[DeclaredScale, ...]) -> Check:
    rule = "scaling"
    width = width or score_width(None, attention)
    if width.head_dim is None:
        return Check(rule, "skip", _width_unknown(width.latent))
    head_dim, name = width.head_dim, width.name
    absorbed = "" if width.latent is None else (
        f" ({width.source}: Q·Kᵀ runs over its {width.latent}-wide latent, W_UK absorbed into the queries, which "
        "leaves the scale as it is)")
    books = math.isclose(attention.scale, 1 / math.sqrt(head_dim), rel_tol=1e-4)
    design = _declared(attention.scale, declared, design=True)
    if books and design is None and (ignored := _other_design(declared, head_dim, strict=True)) is not None:
        return Check(rule, "fail", _design_ignored(attention, width, ignored, absorbed))
    if books:
        yarn = "" if design is not None or (also := _other_design(declared, head_dim)) is None else (
            f" — the config's rope_scaling declares YaRN's mscale ({math.sqrt(also.scale * math.sqrt(head_dim)):.4g}):"
            f" DeepSeek's attention divides by √{head_dim} ÷ mscale² = {1 / also.scale:.4g}, Ministral 3's by "
            f"√{head_dim}; both are what real models do")
        return Check(rule, "pass", f"the scores are divided by √{name} = √{head_dim} ≈ {math.sqrt(head_dim):.3g}"
                                   f"{absorbed}{yarn}")
    if design is not None:
        return Check(rule, "pass", f"the scores are divided by {design.words}; the book's is √{name} = √{head_dim}"
                                   f"{absorbed}")
    own = _declared(attention.scale, declared, design=False)
    ignored = _other_design(declared, head_dim)
    words = (_wrong_scale(attention, width, absorbed) if ignored is None
             else _design_ignored(attention, width, ignored, absorbed))
    return Check(rule, "fail", words + ("" if own is None else f" — the scale is the module's {own.words}"))


def _other_design(declared: tuple[DeclaredScale, ...], head_dim: int, *, strict: bool = False) -> DeclaredScale | None:
    """The first scale the module's config declares as its model's design (:func:`declared_scales`) that is not
    1/√``head_dim``: the scale the module must apply instead of the book's; None when the config declares none.
    ``strict``: only a design that leaves no room for the book's scale (not YaRN's mscale: ``books_too``)."""
    return next((found for found in declared
                 if found.design and not (strict and found.books_too)
                 and not math.isclose(found.scale, 1 / math.sqrt(head_dim), rel_tol=1e-4)), None)


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


def softcap_words(cap: float) -> str:
    """Words for a soft-cap of the scaled scores before the softmax (``Attention.softcap``)."""
    return f"soft-cap s → {cap:g} · tanh(s / {cap:g}) (Gemma 2's attn_logit_softcapping)"


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
        recording = tracing.record(module, x)
        attention = tracing.combine(recording.attentions)
    finally:
        module.train(was_training)
    # the p of a dropout on the weights that drops, read from its own calls too: heads recorded one by one (the
    # book's MultiHeadAttentionWrapper) each have their own
    after_p = max((p for index, training, p in recording.dropout_calls
                   if training and recording.ops[index].stage == "dropped"), default=0.0)
    acts = _dropout_acts(attention) or after_p > 0
    if was_training and acts:
        share = attention.dropout_p or attention.dropout_after_p or after_p
        return Check(rule, "fail", f"the module is in training mode: dropout zeroes about {share:.0%} of the "
                                   "attention weights, so two runs of the same text differ — call "
                                   "module.eval() before looking at attention")
    if attention.dropout_ops:
        return Check(rule, "fail", _dropout_on_scores(attention))
    if acts:
        return Check(rule, "pass",
                     "in training mode dropout acts on the weights after the softmax; in eval mode not at all")
    if (idle := _idle_dropout(recording)) is not None:
        return Check(rule, "fail", f"the dropout on the weights after the softmax (p = {idle:g}) is called with "
                                   "training=False, so it drops nothing in training mode either: pass "
                                   "training=self.training to F.dropout (or use nn.Dropout)")
    return Check(rule, "pass", _no_dropout_acts(module, recording, attention))


def _dropout_in_each(module: nn.Module, x: torch.Tensor, attentions: list[tracing.Attention],
                     recording: tracing.Recording, own_file: str | None) -> Check:
    """dropout-placement on the first of the forward's attentions whose dropout acts in eval mode, named when it is a
    later one (a model's layer: "attention 2 of 2 on line 30: …"), else on the first."""
    acting = next((index for index, one in enumerate(attentions) if _dropout_acts(one)), 0)
    check = dropout_placement(module, x, attentions[acting])
    if acting and check.status == "fail":
        named = _attention_named(recording, attentions[acting], acting, len(attentions), own_file)
        return Check(check.rule, "fail", f"{named}: {check.evidence}")
    return check


def _dropout_on_scores(attention: tracing.Attention) -> str:
    """dropout-placement's words for a dropout between Q·Kᵀ and the softmax: what it does there — a dropped score is
    0, which the softmax turns into a weight, and the kept ones are scaled up — and, by where it is against the mask,
    what becomes of the cells the mask hides."""
    place = f"the dropout{attention.dropout_place}"
    if attention.dropout_vs_mask == "after":
        where = f"{place} acts on the masked scores before the softmax"
        outcome = ("a hidden score it drops becomes 0 too, so in training mode a key the mask hides gets weight "
                   "exp(0)/Σ (its row is NaN where the fill is −∞: 0 · −∞)")
    else:
        where = (f"{place} acts on the scores before the mask and the softmax" if attention.dropout_vs_mask == "before"
                 else f"{place} acts on the scores before the softmax")
        outcome = "the rows still sum to 1, but they are not the weights with some keys dropped"
    return (f"{where}: a score it drops becomes 0, and the softmax still gives its key exp(0)/Σ — more or less than "
            f"before, never 0 —, while the scores it keeps are multiplied by 1/(1 − p), which sharpens each row; "
            f"{outcome}: apply the dropout to the weights after the softmax")


def _idle_dropout(recording: tracing.Recording) -> float | None:
    """The p of a dropout on the weights after the softmax that a training-mode forward calls with a p above 0 and
    training=False (``F.dropout(w, 0.1, training=False)``); None when there is none."""
    return next((p for index, training, p in recording.dropout_calls
                 if recording.ops[index].stage == "dropped" and p > 0 and not training), None)


SEE_DROPOUT = ("build the module with dropout 0.1 (attnviz check --dropout 0.1; the app's Dropout p) to see it act in "
               "training mode only")
_DROPOUT_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _no_dropout_acts(module: nn.Module, recording: tracing.Recording, attention: tracing.Attention) -> str:
    """dropout-placement's words for a module whose training-mode forward drops nothing from the weights: a dropout
    of p = 0 on the weights after the softmax (the book's MultiHeadAttention built with dropout 0), a dropout of
    p = 0 elsewhere or in the fused call, a dropout that acts elsewhere only, an nn.Dropout the forward never calls,
    or no dropout at all — and, for a p of 0, how to see where it acts."""
    calls = recording.dropout_calls  # (op index, training, p) of every F.dropout / nn.Dropout call
    if any(recording.ops[index].stage == "dropped" for index, _, _ in calls):  # its p is 0 (_idle_dropout)
        return f"the dropout on the weights after the softmax, where the book puts it, has p = 0 — {SEE_DROPOUT}"
    if any(training and p > 0 for _, training, p in calls):
        return "no dropout acts on the attention weights: the module's dropout acts elsewhere (not after the softmax)"
    fused, argument, given = {
        "sdpa": ("scaled_dot_product_attention", "dropout_p", "passes its dropout as dropout_p"),
        "nn.MultiheadAttention": ("nn.MultiheadAttention", "dropout", "passes its dropout on to it"),
    }.get(attention.kind, (None, None, None))
    layers = {name: layer for name, layer in module.named_modules() if isinstance(layer, _DROPOUT_LAYERS)}
    if uncalled := [f"self.{name} (p = {layer.p:g})" for name, layer in layers.items() if layer.p > 0]:
        return (f"no dropout acts on the attention weights: the forward never calls {', '.join(uncalled)} — the book "
                "applies its dropout to the weights after the softmax")
    if calls or layers:
        where = "" if fused is None else f", as has {fused}'s {argument}"
        return f"the module's dropout has p = 0{where} — {SEE_DROPOUT}"
    if fused is not None:
        return f"{fused}'s {argument} is 0 and the module has no nn.Dropout — if the module {given}, {SEE_DROPOUT}"
    return "the module has no dropout (no nn.Dropout, no F.dropout call): there is no dropout to place"


def _dropout_acts(attention: tracing.Attention) -> bool:
    """Whether a dropout acts on the weights: an SDPA / MultiheadAttention call's dropout_p, or the dropout between
    the softmax and @ V asked to drop (its own call's training and p — not whether the weights that reach V differ
    from the softmax's: a mask after the softmax changes them too, and other rules name it)."""
    return attention.dropout_p > 0 or attention.dropout_after_p > 0


def batch_independence(module: nn.Module, x: torch.Tensor, output: torch.Tensor, *,
                       not_finite: NotFinite | None = None) -> Check:
    """``not_finite``: why the module's output, not finite, cannot be compared (:func:`not_finite_output`): the
    verdict."""
    rule = "batch-independence"
    if not_finite is not None:
        return not_finite.verdict(rule)
    generator = torch.Generator().manual_seed(2)
    for item in range(x.shape[0]):
        changed = x.clone()  # (b, n, d_in)
        others = [i for i in range(x.shape[0]) if i != item]
        changed[others] = torch.randn(changed[others].shape, generator=generator).to(x.dtype)
        with torch.no_grad():
            moved = (module_output(module, changed)[item] - output[item]).abs()  # (n, d_out)
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
            still = (module_output(module, changed)[item] - module_output(module, x)[item]).abs().max().item()
    except tracing.TraceError:
        return None
    finally:
        for _, sub in found:
            sub.batch_first = False
    if still > TOLERANCE:
        return None
    return tracing.not_batch_first_words(found[0][0], tuple(x.shape), items_mixed=True)


def matches_reference(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                      scaled: bool = True, window: int | None = None, causal_said: str | None = None,
                      width: ScoreWidth | None = None, declared: tuple[DeclaredScale, ...] = (),
                      cap: DeclaredCap | None = None, sinks: DeclaredSinks | None = None,
                      fill: FiniteFill | None = None, own_file: str | None = None) -> Check:
    """``causal_said``: who said whether the module is causal (:func:`_causal_said_by`): a failure says its reference
    masks (or not) as that says, so a mask the statement and the module disagree on reads as one fault; ``width``:
    the head_dim the reference's scale divides by (:func:`score_width`; None: the width of Q·Kᵀ); ``declared``: the
    scales the module declares (:func:`declared_scales`): the reference scales as its config's design when the
    module does, as ``scaling`` passes it.  A failure that the module's own scale alone explains says so.  Keys and
    values that pair the query heads differently fail it too (:func:`_paired_alike`), and so do a soft-cap other than
    the one the module declares (``cap``: :func:`declared_softcap`; :func:`softcap_mismatch`) and sink logits other
    than the module's own, one per head (``sinks``: :func:`declared_sinks`; :func:`sinks_mismatch`), each compared
    once, here (:mod:`attnviz.softcap_sinks_rule`).  ``fill``: the module's own masked_fill that sets the future to a
    number that hides nothing (:func:`_finite_fill`), which a failure names as mask-convention does.  A declared cap
    whose tanh stops the walk back to Q @ Kᵀ (:func:`unread_softcap`) fails, naming the tanh's line in ``own_file``
    (:func:`attnviz.tracing.class_file`)."""
    cap_words, sinks_words = softcap_mismatch(attention, cap), sinks_mismatch(attention, sinks)
    check = _reference_verdict(recording, attention, causal, scaled=scaled, window=window, causal_said=causal_said,
                               width=width, declared=declared, cap=cap, sinks=sinks, fill=fill,
                               cap_agreed=cap is not None and cap_words is None,
                               sinks_agreed=sinks is not None and sinks_words is None)
    if check.status == "skip":
        unread = unread_softcap(recording, attention, cap, own_file)
        return check if unread is None else Check(check.rule, "fail", unread)
    mismatches = [words for words in (cap_words, sinks_words) if words]
    if mismatches and check.status == "fail":
        check = Check(check.rule, "fail", f"{'; '.join(mismatches)}; and {check.evidence}")
    elif mismatches:
        check = Check(check.rule, "fail", f"{'; '.join(mismatches)} (otherwise {check.evidence})")
    return _paired_alike(check, attention)


def _reference_verdict(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                       scaled: bool, window: int | None, causal_said: str | None, width: ScoreWidth | None,
                       declared: tuple[DeclaredScale, ...], cap: DeclaredCap | None = None,
                       sinks: DeclaredSinks | None = None, fill: FiniteFill | None = None,
                       cap_agreed: bool = False, sinks_agreed: bool = False) -> Check:
    if scaled and width is not None and width.head_dim is None and width.latent is not None:
        return Check("matches-reference", "skip", f"the reference's scale is not known: {_width_unknown(width.latent)}")
    head_dim = None if width is None else width.head_dim
    design = None if not scaled or attention.scale is None else _declared(attention.scale, declared, design=True)
    reference = functools.partial(_matches_reference, recording, attention, causal, scaled=scaled, window=window,
                                  head_dim=head_dim, cap=cap, sinks_declared=sinks, fill=fill, cap_agreed=cap_agreed,
                                  sinks_agreed=sinks_agreed)
    check = reference(scale=None if design is None else design.scale)
    if not scaled and check.status != "skip":
        check = Check(check.rule, check.status, f"{check.evidence} — unscaled, as the module's scores are (see "
                                                "scaling)")
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
    if check.status == "fail" and causal_said:
        follows = "masks the future" if causal else "masks nothing"
        return Check(check.rule, "fail", f"{check.evidence} — the reference {follows}: {causal_said}")
    return check


def _paired_alike(check: Check, attention: tracing.Attention) -> Check:
    """``check`` failed when the query heads that share keys and those that share values cross (:func:`_crossed`):
    K repeated with ``repeat_interleave`` and V with ``.repeat`` (or the reverse), so a query head reads one K/V
    head's keys and another's values — an attention computation right for the K and V each head got, and still a
    bug.  Heads share keys (values) when theirs are equal (:func:`_head_groups`); where one side shares nothing
    (multi-head attention, values shared but keys per head), or every head that shares one shares the other
    (multi-query attention, grouped-query with K and V repeated alike), nothing is paired wrongly."""
    keys, values = _head_groups(attention.keys, attention.queries), _head_groups(attention.values, attention.queries)
    if keys is None or values is None:
        return check
    if not _crossed(keys, values):
        return Check(check.rule, check.status, f"{check.evidence}{_tiled_note(keys, values)}") if (
            check.status == "pass") else check
    head = next(head for head, (key, value) in enumerate(zip(keys, values, strict=True)) if key != value)
    pairing = (f"query head {head} reads K/V head {keys[head]}'s keys but K/V head {values[head]}'s values: the keys "
               f"group the query heads {_grouping(keys)}, the values {_grouping(values)} — repeat K and V the same "
               "way, e.g. repeat_interleave(group_size, dim=1) on both")
    if check.status == "fail":
        return Check(check.rule, "fail", f"{pairing}; and {check.evidence}")
    return Check(check.rule, "fail", f"{pairing} ({check.evidence}: each head's attention is right for the K and V "
                                     "it reads)")


def _tiled_note(keys: list[int], values: list[int]) -> str:
    """A pass's note for grouped-query K and V both repeated as ``.repeat`` does (query head h reads K/V group h mod
    g, :func:`_head_groups`), where ``repeat_interleave`` would group the heads otherwise (1 < g < h): right with the
    module's own weights, but a checkpoint of Hugging Face's or Meta's Llama (``repeat_kv``), or the book's
    ``GroupedQueryAttention``, pairs query head h with K/V group h // (h/g), so its weights loaded here give other
    outputs; "" otherwise."""
    heads, groups = len(keys), max(keys) + 1
    tiled = [head % groups for head in range(heads)]
    if keys != values or keys != tiled or not 1 < groups < heads:
        return ""
    size = heads // groups
    return (f"; K and V are both repeated as .repeat does (query head h reads K/V group h mod {groups}): right with "
            "its own weights, but the checkpoints of Hugging Face's and Llama's grouped-query models (repeat_kv) and "
            f"the book's GroupedQueryAttention give query head h K/V group h // {size}, as repeat_interleave({size}, "
            "dim=1) does — to load their weights, repeat K and V that way")


PAIRING_TOLERANCE = 1e-6  # two heads' keys (or values) are one K/V head's when they differ by no more, × the largest


def _head_groups(tensor: torch.Tensor | None, queries: torch.Tensor | None) -> list[int] | None:
    """The K/V head each query head reads ``tensor`` (keys or values, (b, g or h, n, d)) from, numbered as the query
    heads first read them: query heads whose tensors are equal (≤ PAIRING_TOLERANCE × the largest |value|) share one
    — (0, 0, 1, 1) for ``repeat_interleave``, (0, 1, 0, 1) for ``.repeat``; None when the heads cannot be matched
    to the queries'."""
    if tensor is None or queries is None or tensor.dim() != 4 or queries.dim() != 4:
        return None
    per_head = per_query_head(tensor, queries)  # (b, h, n, d)
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
    dtype = lowest_precision((attention.queries, attention.keys, attention.values))
    if dtype is None or attention.values is None:
        return None
    largest = attention.values.float().abs().max().item()
    return str(dtype).removeprefix("torch."), max(TOLERANCE, torch.finfo(dtype).eps * largest)


def _matches_reference(recording: tracing.Recording, attention: tracing.Attention, causal: bool, *,
                       scaled: bool = True, window: int | None = None, head_dim: int | None = None,
                       scale: float | None = None, cap: DeclaredCap | None = None,
                       sinks_declared: DeclaredSinks | None = None, fill: FiniteFill | None = None,
                       cap_agreed: bool = False, sinks_agreed: bool = False) -> Check:
    """matches-reference's comparison with the reference from the module's own Q, K, V, its own soft-cap and sink
    logits (``cap``, ``sinks_declared``: what the module declares, which the words say the cap and the logits are
    when they agree — ``cap_agreed``, ``sinks_agreed``: as :func:`matches_reference` found them, failing them when
    they do not); ``fill``: the module's masked_fill of
    the future with a finite number (:func:`_finite_fill`), which a failure names."""
    rule = "matches-reference"
    if attention.queries is None or attention.keys is None or attention.values is None:
        lost = f" ({attention.lost})" if attention.lost else ""
        return Check(rule, "skip", f"the module's Q, K and V could not all be identified{lost}: the rule follows the "
                                   "softmax's input back through a scale and a mask to Q @ Kᵀ, and its output through "
                                   "dropout and numbers to weights @ V")
    queries, keys, values = attention.queries, attention.keys, attention.values  # (b, h, n, d)
    slopes, moved = _added_bias(attention)
    bias = None if slopes is None else slopes[..., None, None] * torch.arange(attention.masked.shape[-1])  # (b,h,1,nk)
    if attention.sink_weights is not None and attention.sinks is None:
        return Check(rule, "skip", f"the sink logits could not be identified ({SINK_WORDS}): the rule reads them "
                                   "from a torch.cat of the scores and one column before the softmax")
    reference = reference_context(queries, keys, values, causal, scaled=scaled, window=window, bias=bias,
                                  head_dim=head_dim, scale=scale, softcap=attention.softcap,
                                  sinks=attention.sinks)  # (b, h, nq, dv)
    precision = _inputs_precision(attention)
    check = _compared_with(recording, attention, reference, TOLERANCE if precision is None else precision[1],
                           formula=REFERENCE if scaled else UNSCALED_REFERENCE)
    if attention.softcap is not None and check.status != "skip":
        check = Check(rule, check.status, f"{check.evidence} — the reference applies the module's "
                                          f"{softcap_words(attention.softcap)} to its scaled scores ("
                                          + (f"the cap the module declares, {cap.words}" if cap_agreed else
                                             _cap_taken_words(attention.softcap) if cap is None else
                                             "the cap it applies") + ")")
    if attention.sinks is not None and check.status != "skip":
        check = Check(rule, check.status, f"{check.evidence} — with the module's sink logits beside the scores and "
                                          f"their column dropped after the softmax ({SINK_WORDS}; the sink logits are "
                                          + (f"{sinks_declared.words}, each head its own" if sinks_agreed else
                                             "the module's own: it keeps none under a sink's name, not checked"
                                             if sinks_declared is None else "the ones the softmax got") + ")")
    if slopes is not None and check.status != "skip":
        return Check(rule, check.status, f"{check.evidence} — with the ALiBi bias the module adds to the scores (a "
                                         "slope per head times the key's position, m·j: the slopes are its own, not "
                                         "checked)")
    if check.status == "fail" and fill is not None:
        return Check(rule, "fail", f"{check.evidence} — {_finite_fill_words(fill)}")
    if check.status == "fail" and moved and _low_precision(attention) is None:  # else rounding moved them
        return Check(rule, "fail", f"{check.evidence} — the module adds to the scores something that is neither a mask "
                                   "(−∞, or a push down by at least 10³ or one per key, whichever is more) nor ALiBi's "
                                   "slope × key position "
                                   f"(the cells it shows move by up to {moved:.3g} against each other in a row): the "
                                   "reference adds nothing")
    return check


def _cap_taken_words(applied: float) -> str:
    """matches-reference's words for a soft-cap no declaration says (:func:`declared_softcap`): the check takes the
    cap the module applies, ``applied``, as its own, and says how to tell it the cap the module was built with."""
    return (f"the check takes the cap it applies, {applied:g}, as the module's own: it keeps no cap under a name "
            "attnviz reads (attn_logit_softcapping, softcap …) and was built with none attnviz knows, so the cap is "
            "not checked — if it was built with another, tell the checker: check_module(module, sizes={\"softcap\": "
            "…}) in Python, or, for attnviz check, a constructor argument named attn_logit_softcapping or softcap")


def _compared_with(recording: tracing.Recording, attention: tracing.Attention, reference: torch.Tensor,
                   tolerance: float = TOLERANCE, *, formula: str = REFERENCE) -> Check:
    """matches-reference's comparison of the module's concatenated heads (or output, or context) with ``reference``,
    the heads' context (b, h, nq, dv) computed from its own Q, K and V, to ``tolerance``; ``formula``: the reference's
    words."""
    rule = "matches-reference"
    keyless = bool(attention.masked_cells().all(-1).any())  # a query with no visible key: its weights are NaN
    if attention.rows_zeroed is not None:  # a head or query mask after the softmax: those rows' context is 0
        reference = reference.masked_fill(attention.rows_zeroed, 0.0)  # (b, h, nq, dv)
    b, h, nq, dv = reference.shape
    concat = reference.transpose(1, 2).reshape(b, nq, h * dv)  # (b, h, nq, dv) -> (b, nq, h·dv)
    if attention.out_proj is not None:  # nn.MultiheadAttention: compare its output after out_proj
        weight, bias = attention.out_proj
        expected = torch.nn.functional.linear(concat, weight, bias)  # (b, nq, E)
        return _compare(rule, attention.returned, expected, "the output", tolerance=tolerance, formula=formula,
                        keyless=keyless)
    module_concat = _concat_fed_onwards(recording, attention, concat.shape)
    if module_concat is None:
        context = attention.returned if attention.returned is not None else attention.context
        if context is None:
            return Check(rule, "skip", "the module's context (weights · V) could not be identified")
        return _compare(rule, context, reference, "the context", tolerance=tolerance, formula=formula,
                        keyless=keyless)
    if h > 1:
        return _compare(rule, module_concat, concat, "the concatenated heads", equals="equal", tolerance=tolerance,
                        formula=formula, keyless=keyless)
    return _compare(rule, module_concat, concat, "the context", tolerance=tolerance, formula=formula,
                    keyless=keyless)


def reference_context(queries, keys, values, causal: bool, *, scaled: bool = True,
                      window: int | None = None, bias: torch.Tensor | None = None,
                      head_dim: int | None = None, scale: float | None = None,
                      softcap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(mask(Q·Kᵀ/√d_head))·V for (b, h, n, d) tensors, in float32 (``scaled=False``: unscaled, for a module
    without weights that applies no scale, as the book's simplified self-attention (3.3);
    ``window``: the causal mask also hides the keys ``window`` or more behind; ``bias`` (b, h, 1, nk): added to the
    scaled scores, ALiBi's slope × key position; ``head_dim``: d_head when it is not the width d of Q and K, as in
    absorbed MLA's scores over the latent; ``scale``: what multiplies Q·Kᵀ instead of 1/√d_head — a config's own;
    ``softcap``: the scaled scores soft-capped to cap · tanh(s / cap) before the bias and the mask, as Gemma 2 does;
    ``sinks`` (b, h, nq, 1): an attention sink's logits, a column the softmax runs over after the keys and that is
    dropped after it, as GPT-OSS does)."""
    queries, keys, values = queries.float(), per_query_head(keys, queries), per_query_head(values, queries)
    scores = queries @ keys.transpose(-2, -1)  # (b, h, nq, d) @ (b, h, d, nk) -> (b, h, nq, nk)
    if scaled and scale is not None:
        scores = scores * scale  # (b, h, nq, nk)
    elif scaled:
        scores = scores / math.sqrt(head_dim or queries.shape[-1])  # (b, h, nq, nk)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)  # (b, h, nq, nk)
    if bias is not None:
        scores = scores + bias  # (b, h, nq, nk)
    if causal:
        nq, nk = scores.shape[-2:]
        diff = (torch.arange(nq)[:, None] + nk - nq) - torch.arange(nk)[None, :]  # (nq, nk): how far back
        hidden = (diff < 0) | (diff >= window) if window else diff < 0  # (nq, nk)
        scores = scores.masked_fill(hidden, -torch.inf)  # (b, h, nq, nk)
    if sinks is not None:
        joined = torch.cat([scores, sinks.float().expand(*scores.shape[:-1], 1)], dim=-1)  # (b, h, nq, nk + 1)
        return torch.softmax(joined, dim=-1)[..., :-1] @ values  # (b, h, nq, nk) @ (b, h, nk, dv) -> (b, h, nq, dv)
    return torch.softmax(scores, dim=-1) @ values  # (b, h, nq, nk) @ (b, h, nk, dv) -> (b, h, nq, dv)


def _added_bias(attention: tracing.Attention) -> tuple[torch.Tensor | None, float]:
    """What the module adds to its scaled scores besides the mask, read on the cells it shows (a constant per row
    aside: the softmax never sees one): (ALiBi's slopes (b, h) — a slope per head times the key's position —, 0.0),
    or (None, how far the shown cells of a row move against each other at most) for another bias; (None, 0.0) when
    it adds nothing."""
    if attention.scaled is None:
        return None, 0.0
    visible = ~attention.masked_cells()  # (b, h, nq, nk)
    before = attention.scaled.float()  # (b, h, nq, nk)
    if attention.softcap is not None:
        before = attention.softcap * torch.tanh(before / attention.softcap)  # (b, h, nq, nk)
    added = (attention.masked.float() - before).masked_fill(~visible, 0.0)  # (b, h, nq, nk)
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
             tolerance: float = TOLERANCE, formula: str = REFERENCE, keyless: bool = False) -> Check:
    """``what`` (its verb ``equals``: "equal" after a plural) passes within ``tolerance`` of ``expected``, the
    reference ``formula`` names, else fails naming the largest difference and where it is — or the first NaN of
    ``actual``, and its cause: ``keyless``, a query of the module's whose keys are all hidden, or NaN weights."""
    actual = actual.float().reshape(expected.shape)
    difference = (actual - expected).abs()  # NaN stays NaN
    worst = difference.nan_to_num(nan=math.inf).max().item()
    if worst <= tolerance:
        return Check(rule, "pass", f"{what} {equals} {formula} from its own Q, K, V "
                                   f"(largest difference {worst:.1g})")
    index = tuple(int(i) for i in (difference.nan_to_num(nan=math.inf) == worst).nonzero()[0])
    if actual.isnan().any():
        where = tuple(int(i) for i in actual.isnan().nonzero()[0])
        cause = ("a query with every key hidden, whose softmax is 0/0 (see mask-convention)" if keyless else
                 "its attention weights hold NaN")
        return Check(rule, "fail", f"{what} ≠ {formula} from its own Q, K, V: the module's is NaN at index {where} "
                                   f"(reference {expected[where].item():.4g}) — {cause}")
    return Check(rule, "fail", f"{what} ≠ {formula} from its own Q, K, V: off by {worst:.3g} "
                               f"at index {index} (module {actual[index].item():.4g}, reference "
                               f"{expected[index].item():.4g})")


def _require_finite_output(output: torch.Tensor, attentions: list[tracing.Attention]) -> None:
    """TraceError when the output holds NaN or ±∞ at a query whose attention weights are all finite, in every
    attention the forward computed (a model's layers): the rules compare outputs, and NaN hides every change, so a NaN
    made after the attention would pass them all.  (NaN weights — a row whose every key is hidden, in any layer — are
    the rules' to name: :func:`not_finite_output`.)"""
    output_bad = ~torch.isfinite(output).all(-1)  # (b, n)
    rows = [attention.weights for attention in attentions
            if attention.weights.dim() == 4 and (attention.weights.shape[0], attention.weights.shape[2])
            == tuple(output_bad.shape)]  # (b, h, nq, nk) each, nq = n
    if not rows:
        return
    weights_finite = torch.stack([torch.isfinite(weights).all(-1).all(1) for weights in rows]).all(0)  # (b, nq)
    bad = output_bad & weights_finite
    if bad.any():
        item, position = (int(i) for i in bad.nonzero()[0])
        raise tracing.TraceError(
            f"the output holds NaN or ∞ at {int(bad.sum())} of {bad.numel()} positions (first: item {item}, position "
            f"{position}) while the attention weights there are finite: the NaN comes after the attention (the output "
            "projection, or what follows it), and the rules cannot compare NaN outputs")


NOT_FINITE_STAGES = (("queries", "the queries"), ("keys", "the keys"), ("values", "the values"),
                     ("scores", "the scores QKᵀ"), ("scaled", "the scaled scores"),
                     ("masked", "the softmax's input"), ("weights", "the attention weights"),
                     ("dropped", "the weights after dropout"), ("context", "each head's weights @ V"))
MASKABLE = ("scores", "scaled", "masked")  # stages where −∞ is a mask, not a fault


def not_finite_output(recording: tracing.Recording, module: nn.Module,
                      selected: Iterable[str] = RULES) -> NotFinite | None:
    """Why the rules that compare outputs cannot check a module whose traced output holds NaN or ∞ — how many
    positions, the first, and the first recorded step of the forward that holds a value that is not finite
    (:func:`_first_not_finite`) —, and which of the ``selected`` rules fails for it: rows-sum-to-one when NaN weights
    are in a row with a visible key, mask-convention when only rows whose keys are all hidden hold them (their softmax
    is 0/0), in any of the forward's attentions (both rules read each); None when the output is finite.
    (NaN weights are all a finite-weights output can hold NaN from:
    :func:`_require_finite_output` stops the check on the rest.)"""
    output = recording.output
    bad = ~torch.isfinite(output)
    if not bad.any():
        return None
    what = "NaN" if output.isnan().any() else "∞"
    if output.dim() >= 3:
        positions = bad.flatten(2).any(-1)  # (b, n)
        item, position = (int(i) for i in positions.nonzero()[0])
        where = (f"at {int(positions.sum())} of {positions.numel()} positions (first: item {item}, position "
                 f"{position})")
    else:
        where = f"at {int(bad.sum())} of {bad.numel()} values"
    equals = "NaN equals nothing" if what == "NaN" else "∞ − ∞ is NaN"
    words = f"the output is {what} {where}, and {equals}, so it cannot be compared"
    first, stage = _first_not_finite(recording, module)
    if first is not None:
        words += f"; {first}"
    nan_rows = [~torch.isfinite(one.weights).all(-1) for one in recording.attentions]  # (b, h, nq) each
    visible_rows = [(~one.masked_cells()).any(-1) for one in recording.attentions]  # (b, h, nq): with a visible key
    named = ("rows-sum-to-one" if any((nan & visible).any() for nan, visible in zip(nan_rows, visible_rows))
             else "mask-convention" if any(nan.any() for nan in nan_rows) else None)
    return NotFinite(words, named if named in selected else None, inputs=stage in ("queries", "keys", "values"))


def _first_not_finite(recording: tracing.Recording, module: nn.Module) -> tuple[str | None, str | None]:
    """Words for the first recorded step of the forward (the attentions in order, each's stages in
    :data:`NOT_FINITE_STAGES` order) that holds NaN or ∞ — −∞ before the softmax is a mask —, where it is, the line
    that made it and, for weights whose row hides every key, why: "NaN first appears in the attention weights on line
    30 (head 0, query 0: every key hidden, so its softmax is 0/0)", and its stage; (None, None) when no recorded step
    is."""
    own = tracing.class_file(module)
    for number, attention in enumerate(recording.attentions, start=1):
        for stage, name in NOT_FINITE_STAGES:
            tensor = getattr(attention, stage)
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or tensor.dim() != 4:
                continue
            bad = tensor.isnan() | tensor.isposinf() if stage in MASKABLE else ~torch.isfinite(tensor)
            if not bad.any():
                continue
            item, head, row, _ = (int(i) for i in bad.nonzero()[0])
            op = _stage_op(recording, attention, stage)
            place = "" if op is None else tracing.op_place(op, own)
            which = f" of attention {number} of {len(recording.attentions)}" if len(recording.attentions) > 1 else ""
            at = (f"item {item}, " if item else "") + (f"head {head}, " if tensor.shape[1] > 1 else "")
            at += f"{'position' if stage in ('queries', 'keys', 'values') else 'query'} {row}"
            if stage == "weights" and attention.masked_cells()[item, head, row].all():
                at += ": every key hidden, so its softmax is 0/0"
            return f"{'NaN' if tensor[bad].isnan().any() else '∞'} first appears in {name}{which}{place} ({at})", stage
    return None, None


def _stage_op(recording: tracing.Recording, attention: tracing.Attention, stage: str) -> tracing.Op | None:
    """The recorded op that made ``attention``'s ``stage``: its softmax for the weights, else the nearest op of that
    stage before the softmax (the scores) or after it (the context); None for Q, K and V, or when none is."""
    if not 0 <= attention.op_index < len(recording.ops) or stage in ("queries", "keys", "values"):
        return None
    if stage == "weights":
        return recording.ops[attention.op_index]
    before = range(attention.op_index - 1, -1, -1) if stage in MASKABLE else range(attention.op_index + 1,
                                                                                    len(recording.ops))
    return next((recording.ops[index] for index in before if recording.ops[index].stage == stage), None)


def _weightless(module: nn.Module) -> bool:
    return not any(True for _ in module.parameters())


