"""What every run returns: a ``Trace`` (tokens, embeddings, the named steps, shapes, notes), ready to draw.

Every producer (:mod:`attnviz.producers`) builds its Trace with :func:`make_trace`; views, the diagram, caching
and exports read only the Trace.  Arrays are float32 NumPy on the CPU and read-only: a cached Trace is shared
by every session.  :meth:`Trace.head_vectors` is the one place that splits the recorded queries, keys and values
into one head's: every reader asks it instead of knowing each producer's layout; :func:`require_trace` is the one
check that a function's argument is a Trace.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from attnviz import tokens
from attnviz.attention import MAP_STAGES, STAGES
from attnviz.config import AttentionConfig, InputError
from attnviz.words import amount


@dataclass(frozen=True, eq=False)  # holds arrays
class ModelRun:
    """What a checkpoint's run adds to its Trace: where the layer sits, the whole path, the predictions."""

    layer: int
    n_layers: int
    path: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape): tokens, tok_emb, pos_emb, input, blocks…, logits
    top_ids: np.ndarray  # (n, 5) int64: the model's most likely next tokens after each position
    top_probs: np.ndarray  # (n, 5) float32, descending per row
    window: int | None = None  # the layer's own sliding window (a config's schedule); None: no window
    always_causal: bool = False  # the layer's attention hides the future whatever ``causal`` says (the book's SWA)


@dataclass(frozen=True)
class ScoreWidth:
    """The head_dim a user module's scale is judged against (None: not known), the name the verdict gives it and
    where it comes from; ``latent``: the width Q·Kᵀ runs over when that is the module's latent (MLA with W_UK absorbed
    into the queries), else None; ``summed_widths``: the widths of the two products the scores are the sum of
    (q₁·k₁ + q₂·k₂, whose recorded q and k are the concatenations), () for one product.
    :func:`attnviz.tracing.score_width` reads it, for the checker and for the Trace (``ModuleRun.score_width``)."""

    head_dim: int | None
    name: str = "head_dim"
    latent: int | None = None
    source: str = ""  # "the per-head width the module keeps as qk_head_dim"
    summed_widths: tuple[int, ...] = ()


@dataclass(frozen=True)
class StageSource:
    """Where the line that computed a stage of a user module is: the class or function of its code whose source holds
    it (:class:`attnviz.code_places.CodePlaces`), read with ``inspect`` from the module's own class objects."""

    owner: str  # the class or function whose source holds it: "MyMultiHeadAttention", "masked_softmax"; "" unknown
    function: str  # the method of ``owner`` that holds it ("forward", "attend"); "" for a function, or none found
    filename: str  # the file that holds the line
    file_named: str  # that file as the page names it: the user's by its name alone, a library's as an import names it
    line: int  # the line, in ``filename``
    source: str = ""  # ``owner``'s source; "" for a library's (not shown) or where Python cannot read it
    first_line: int = 1  # the line of ``filename`` where ``source`` starts
    library: bool = False  # a file the user did not hand over (a library's): named in words, not shown
    top: bool = False  # ``owner`` is the module's own class

    @property
    def name(self) -> str:
        """"MyMultiHeadAttention.forward", "masked_softmax": the method or function that holds the line."""
        return f"{self.owner}.{self.function}" if self.owner and self.function else self.owner


@dataclass(frozen=True)
class ModuleRun:
    """What a user module's run adds to its Trace: its class, its file and the line of each stage it computed."""

    class_name: str
    filename: str | None
    stage_lines: dict[str, int]  # stage -> line in ``filename`` that produced it
    ops: tuple[tuple[str, tuple[int, ...], int | None, str | None], ...]  # (call, output shape, line, stage) per op
    kind: str  # how its attention was found: "softmax", "sdpa" or "nn.MultiheadAttention"
    source: str = ""  # the class's source text
    first_line: int = 1  # the line of ``filename`` where ``source`` starts
    # why a step is not recorded: "scores" (with scaled, queries, keys) or "context" -> "no Q @ Kᵀ before the …"
    unrecorded: dict[str, str] = field(default_factory=dict)
    # the head_dim its scale is judged by (the checker's, :func:`attnviz.tracing.score_width`): not the recorded q's
    # width for MLA with W_UK absorbed, or scores that add two products; None: the width of the recorded q·k
    score_width: ScoreWidth | None = None
    # (the number the scores are multiplied by, the setting that declares it: "query_pre_attn_scalar = 256") of each
    # scale the module's config declares as its model's (:func:`attnviz.declarations.declared_scales`), for the
    # explanation
    declared_scales: tuple[tuple[float, str], ...] = ()
    # which of the forward's attentions this is, counted from 1 in the order the forward computed them (a model's
    # layers; a wrapper's one-head softmaxes stacked into heads are one), and where each is: "line 35", "" unknown
    # (:func:`attnviz.tracing.picked`)
    attention: int = 1
    attention_places: tuple[str, ...] = ("",)
    # stage -> where its line is, in whichever class or function of the module's code holds it (a submodule's class,
    # a helper, a library's function): the Steps page shows it
    stage_sources: dict[str, StageSource] = field(default_factory=dict)

    @property
    def attention_named(self) -> str:
        """The checker's name for the attention shown, "attention 2 of 2 on line 35"; "" when the forward computed
        one."""
        total = len(self.attention_places)
        return "" if total < 2 else attention_named(self.attention, total, self.attention_places[self.attention - 1])


def attention_named(number: int, total: int, place: str) -> str:
    """"attention 2 of 2 on line 35": the checker's name for the attention ``number`` (counted from 1) of the
    ``total`` a forward computed, and its ``place`` ("line 35"; "": not known)."""
    return f"attention {number} of {total}" + (f" on {place}" if place else "")


@dataclass(frozen=True)
class Trace:
    """One run, ready to draw.  Arrays are float32 NumPy on the CPU; treat them as read-only."""

    config: AttentionConfig
    text: str  # the text that was tokenized (after bounding/cleaning; see notes)
    tokens: tuple[str, ...]  # display pieces, e.g. "·journey"
    token_ids: tuple[int, ...]
    token_details: tuple[tokens.Token, ...]  # pieces with character offsets and special flags
    embeddings: dict[str, np.ndarray]  # "token", "position", "input": (n, d_in) each
    # named intermediates (attention.STAGES); maps are (batch, heads, n, n), batch 1 but for trace_module on a batch
    # (views draw item 0); q/k/v/context are per head from trace_module, as projected from run (docs/api.md's table)
    steps: dict[str, np.ndarray]
    output: np.ndarray  # (batch, n, d_out)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape) in pipeline order, from real tensors
    device: str  # the device that actually ran
    notes: tuple[str, ...] = field(default=())  # things the user should know (truncation, fallback)
    model: ModelRun | None = None  # set when the run used a checkpoint
    module_run: ModuleRun | None = None  # set when the run traced a user's module

    def __repr__(self) -> str:
        """A few lines, not every array (a notebook prints a cell's last value): what ran, the tokens, the heads,
        each recorded step with its shape (steps of one shape together), the batch when it holds more than one,
        and how many notes there are."""
        if self.module_run is not None:
            what = self.module_run.class_name
        elif self.model is not None:
            where = self.config.checkpoint or ""
            name = "a model trained in this session" if where.startswith("session:") else os.path.basename(
                where.rstrip("/\\")) or where
            what = f"layer {self.model.layer} of {self.model.n_layers} of checkpoint {name!r}"
        else:
            what = self.config.spec.label
        weights = self.steps.get("weights")
        batch = int(weights.shape[0]) if weights is not None and weights.ndim == 4 else 1
        heads = amount(int(weights.shape[1]), "head") if weights is not None and weights.ndim == 4 else "no heads"
        items = f"a batch of {batch} × {amount(self.n, 'token')} (views draw item 0)" if batch > 1 else amount(
            self.n, "token")
        lines = [f"Trace of {what}: {items}, {heads}, on {self.device}"]
        shown = ", ".join(repr(token) for token in self.tokens[: 10 if self.n <= 10 else 8])
        lines.append(f"  tokens: {shown}" + (f", … ({self.n:,} in all)" if self.n > 10 else ""))
        order = {name: index for index, name in enumerate(STAGES)}  # the book's stages first, then the others
        groups: list[tuple[list[str], tuple[int, ...]]] = []  # consecutive steps of one shape: one group
        for name, step in sorted(self.steps.items(), key=lambda item: order.get(item[0], len(order))):
            if groups and groups[-1][1] == tuple(step.shape):
                groups[-1][0].append(name)
            else:
                groups.append(([name], tuple(step.shape)))
        line = "  steps:"
        for names, shape in groups:  # a group is never split across lines
            part = f"{', '.join(names)} {shape}"
            if len(line) + len(part) > 116 and not line.endswith(":"):
                lines.append(line + " ·")
                line = "   "
            line += f" {part}" if line.endswith((":", "   ")) else f" · {part}"
        lines.append(line)
        if self.notes:
            lines.append(f"  {amount(len(self.notes), 'note')}: trace.notes")
        return "\n".join(lines)

    @property
    def n(self) -> int:
        return len(self.token_ids)

    @property
    def model_layer(self) -> int | None:
        """The block of a model whose attention this run is (None: the book's classes or a user's module)."""
        return self.model.layer if self.model is not None else None

    @property
    def window(self) -> int | None:
        """The sliding window the run's attention ran with: a checkpoint's layer's own (its schedule may mix window
        and full layers), else the config's."""
        return self.model.window if self.model is not None else self.config.window

    @property
    def hides_future(self) -> bool:
        """Whether every query was kept from later keys: the config's mask, or a layer that always masks.  A user's
        module masks in its own code, so for its run this is also what the code did: the config asks for the causal
        mask (``AttentionConfig.hides_future``: the module means to mask) and its weights give every later key exactly
        0 in every head (item 0) — a mask filled with 0, not −∞, asks and does not (:attr:`leaks_future`)."""
        if self.module_run is not None:
            return self.config.hides_future and self._module_mask[0]
        return self.config.hides_future or (self.model is not None and self.model.always_causal)

    @property
    def leaks_future(self) -> bool:
        """A user module's run that asks for the causal mask (``AttentionConfig.hides_future``) while its weights
        give later keys weight: its maps show those weights, and their titles say the mask was asked for, not
        applied."""
        return self.config.hides_future and not self.hides_future

    def hidden_cells(self, head: int | None = None) -> np.ndarray | None:
        """The cells the run hid, as bool (heads, n, n) of item 0, or head ``head``'s (n, n), where the causal
        triangle of :attr:`hides_future` does not say them all — the cells the maps grey beside that triangle:
        a sliding window's run (every cell −∞ in the masked stage, the triangle's included), or a user module's run
        whose own mask hid a cell outside the triangle or any cell where the run does not hide the future (every
        cell it hid: its softmax's input masked there, :func:`hidden_by_mask` of ``masked`` against ``scaled``, and
        its weight exactly 0; read-only views).  None for any other run: one without a window, a module that hid
        nothing, or one that keeps every query from later keys and hid nothing outside the triangle.  A ``head``
        outside 0 … heads − 1 is an InputError naming the range (:func:`index_in`), whatever the run hid."""
        if head is not None:
            head = index_in(head, self.num_heads, "head")
        if self.module_run is not None:
            hidden = self._module_mask[1]
        elif self.window is not None:
            return window_hidden(self.steps["masked"][0] if head is None else self.attention_map("masked", head))
        else:
            return None
        if hidden is None or head is None:
            return hidden
        return hidden[index_in(head, hidden.shape[0], "head")]

    @functools.cached_property
    def _module_mask(self) -> tuple[bool, np.ndarray | None]:
        """(whether a user module's weights give every later key exactly 0 in every head, the cells
        :meth:`hidden_cells` gives for its run or None), of item 0, computed once a Trace."""
        weights = self.steps["weights"][0]  # (h, n, n)
        future = np.triu(np.ones(weights.shape[-2:], dtype=bool), 1)  # (n, n): the keys after each query
        with np.errstate(invalid="ignore"):  # NaN weights (a row with no key left) reach no key
            reaches = bool((weights[:, future] > 0).any())  # (h, cells above the diagonal)
            masked, scaled = self.steps.get("masked"), self.steps.get("scaled")
            hidden = (np.zeros(weights.shape, dtype=bool) if masked is None  # (h, n, n)
                      else hidden_by_mask(masked[0], None if scaled is None else scaled[0]))
        hidden &= weights == 0
        if not self.config.hides_future or reaches:  # what it hid, the future's part included
            extra = hidden if hidden.any() else None
        else:  # the causal triangle is drawn as such: only cells outside it
            extra = hidden if (hidden & ~future).any() else None
        if extra is not None:
            extra.setflags(write=False)
        return not reaches, extra

    @property
    def num_heads(self) -> int:
        return self.steps["weights"].shape[1]

    def attention_map(self, stage: str, head: int) -> np.ndarray:
        """(n, n) map of ``stage`` for one head, item 0.  InputError for a stage that is not one of the maps this run
        recorded, or a head outside 0 … heads − 1 (:func:`index_in`)."""
        maps = [name for name in MAP_STAGES if name in self.steps]
        if stage not in maps:
            raise InputError(f"stage must be one of {', '.join(maps)} (the maps this run recorded), got {stage!r}.")
        return self.steps[stage][0, index_in(head, self.steps[stage].shape[1], "head")]

    def head_vectors(self, head: int, *, rotated: bool = True) -> HeadVectors:
        """Map head ``head``'s queries, keys and values, item 0, as ``(n, head_dim)`` arrays (views, read-only).

        Reads both layouts docs/api.md gives: ``run``'s, as the projections put them out (``(1, n, heads·hd)``, the
        heads side by side; keys and values ``(1, n, kv_heads·hd)``), and ``trace_module``'s, per head
        (``(batch, heads, n, hd)``, keys and values ``(batch, kv_heads, n, hd)``).  Where keys and values have
        fewer heads than the maps (GQA, MQA, a user's module that never repeats its K/V heads), query head h
        reads K/V head ``h // (heads // kv_heads)``, as ``repeat_interleave`` pairs them.  ``rotated`` (the
        default): where the run rotates q and k (rotary positions) the rotated ones, the q and k that meet in
        QKᵀ; False: the recorded projections before the rotation.  Values are never rotated.

        Raises InputError when the run recorded no queries or keys, ``head`` is not one of the maps' heads, or
        the recorded shapes cannot be split into ``heads`` heads."""
        heads = self.num_heads
        head = index_in(head, heads, "head")
        missing = [stage for stage in ("queries", "keys") if stage not in self.steps]
        if missing:
            why = self.module_run.unrecorded.get("scores") if self.module_run is not None else None
            raise InputError(f"This run recorded no {' or '.join(missing)}: its scores are not a Q·Kᵀ attnviz could "
                             f"find{f' ({why})' if why else ''}, so its heads have no query and key vectors.")
        turned = rotated and "rotated_queries" in self.steps and "rotated_keys" in self.steps
        queries = self.steps["rotated_queries" if turned else "queries"]  # (b, n, h·hd) or (b, h, n, hd)
        keys = self.steps["rotated_keys" if turned else "keys"]  # (b, n, g·hd) or (b, g, n, hd)
        if queries.ndim == 4:  # per head, as they meet in QKᵀ
            recorded_head = _recorded_head(queries.shape[1], heads, head, "queries", queries.shape)
            query_vectors = queries[0, recorded_head]  # (b, h, n, hd) -> (n, hd)
        else:  # the heads side by side along the last dimension
            if queries.ndim != 3 or queries.shape[-1] % heads:
                raise InputError(f"Cannot tell which part of the recorded queries {tuple(queries.shape)} belongs to "
                                 f"head {head} of {heads}.")
            width = queries.shape[-1] // heads  # hd
            query_vectors = queries[0, :, head * width : (head + 1) * width]  # (b, n, h·hd) -> (n, hd)
        head_dim = int(query_vectors.shape[-1])
        key_vectors, kv_head, kv_heads = _split(keys, heads, head, head_dim, "keys")  # (n_k, hd)
        if key_vectors.shape[-1] != head_dim:
            raise InputError(f"The recorded queries {tuple(queries.shape)} and keys {tuple(keys.shape)} have different "
                             "head sizes: q·k is not defined.")
        value_vectors = None
        if "values" in self.steps:
            values = self.steps["values"]  # (b, n, g·hd_v) or (b, g, n, hd_v)
            value_width = values.shape[-1] // kv_heads if values.shape[-1] % kv_heads == 0 else 0  # hd_v, 0: none
            value_vectors, _, _ = _split(values, heads, head, value_width, "values")  # (n_k, hd_v)
        return HeadVectors(head=head, kv_head=kv_head, rotated=turned, queries=query_vectors, keys=key_vectors,
                           values=value_vectors)


@dataclass(frozen=True, eq=False)  # holds arrays
class HeadVectors:
    """One map head's vectors (item 0), read-only views into the Trace's steps."""

    head: int
    kv_head: int  # the recorded K/V head this head reads (== head unless K/V heads are shared)
    rotated: bool  # queries and keys are the rotated ones (rotary positions), the q and k that meet in QKᵀ
    queries: np.ndarray  # (n, head_dim)
    keys: np.ndarray  # (n_keys, head_dim)
    values: np.ndarray | None  # (n_keys, value head_dim); None where the run recorded no values

    @property
    def head_dim(self) -> int:
        return int(self.queries.shape[-1])


def _recorded_head(recorded: int, heads: int, head: int, stage: str, shape) -> int:
    """The recorded head of ``stage`` that map head ``head`` uses: the same one, or its group's under grouped-query
    attention (``heads // recorded`` neighbouring query heads share each K/V head, ``repeat_interleave``)."""
    if recorded == heads:
        return head
    if recorded and heads % recorded == 0:
        return head // (heads // recorded)
    raise InputError(f"The recorded {stage} {tuple(shape)} have {recorded} heads; the maps have {heads}: "
                     f"cannot tell which belongs to head {head}.")


def _split(vectors: np.ndarray, heads: int, head: int, width: int, stage: str) -> tuple[np.ndarray, int, int]:
    """(item 0's vectors of map head ``head``'s K/V head, that K/V head, how many were recorded) from ``keys`` or
    ``values`` recorded per head (b, g, n, hd) or side by side (b, n, g·hd), each head ``width`` wide."""
    if vectors.ndim == 4:  # per head
        kv_head = _recorded_head(vectors.shape[1], heads, head, stage, vectors.shape)
        return vectors[0, kv_head], kv_head, int(vectors.shape[1])  # (b, g, n, hd) -> (n, hd)
    if vectors.ndim != 3 or not width or vectors.shape[-1] % width:
        raise InputError(f"Cannot tell which part of the recorded {stage} {tuple(vectors.shape)} belongs to head "
                         f"{head}: their width is not a multiple of head_dim {width}.")
    recorded = vectors.shape[-1] // width  # g
    kv_head = _recorded_head(recorded, heads, head, stage, vectors.shape)
    return vectors[0, :, kv_head * width : (kv_head + 1) * width], kv_head, recorded  # (b, n, g·hd) -> (n, hd)


def make_trace(config: AttentionConfig, text: str, token_ids: list[int], embeddings: dict, *, steps: dict,
           output: np.ndarray, shapes: tuple, device: str, notes: list[str], model: ModelRun | None = None,
           module_run: ModuleRun | None = None, tokenized: bool = True) -> Trace:
    """A Trace of these tokens: the display pieces are derived here, the same for every run of the same ids.
    ``tokenized`` False: the inputs were vectors, not tokens (a tensor given to ``trace_module``); ``token_ids`` are
    their positions, and the pieces say so (``x[3]``), never the GPT-2 tokens those numbers would be."""
    details = pieces(tuple(token_ids)) if tokenized else tuple(
        tokens.Token(id=int(i), piece=f"x[{i}]", start=0, end=0, special=False) for i in token_ids)
    return Trace(config=config, text=text, tokens=tuple(t.piece for t in details), token_ids=tuple(token_ids),
                 token_details=details, embeddings=embeddings, steps=steps, output=output, shapes=shapes,
                 device=device, notes=tuple(notes), model=model, module_run=module_run)


# A cell is hidden when the mask made its weight 0: the mask pushed the softmax's input at that cell down, from the
# scaled score to the masked value, as far as no bias that is not a mask reaches: by 10³ or by one for every key in
# the row, whichever is more, or to −∞.  Where no scaled score is known, the masked value is the score plus the push,
# and must be 10³ plus one a key below 0.
# Why those bounds: the masks in use push by −10⁴ (BERT's (1 − mask) · −10000, transformers 4.x GPT-2's masked_bias,
# fp16 code: float32 rounds −10⁴ added to a score, fp16's spacing there is 8; added before ÷√d_head, −10⁴/8 = −1250
# at d_head = 64), −10⁹, finfo(dtype).min or −∞, and exp underflows to 0 far above any of them.  A bias that is not a
# mask stays above them: ALiBi adds −m·|i − j| with slopes m = 2^(−8k/H) below 1 for any number of heads H (head 1's
# is 0.92 with 64 heads), so its push is above −n_keys however long the row; and a scaled score below −10³ would take
# |q|·|k| ≥ 10³·√d_head, which no layer's activations come near, so a score plus a bias stays above −(10³ + n_keys).
# The weight itself cannot tell a mask from a bias: ALiBi's own push zeroes far keys' weights (float32's exp
# underflows below about −104), and so would a bound relative to the row's largest score.  Traces hold at most
# 1,024 keys, so a −10⁴ mask, before or after ÷√d_head (d_head ≤ 64), is always below the bound.
HIDDEN_AT = -1e3  # the push that hides a cell in a row of up to 1,000 keys; a longer row's is one per key


def hidden_by_mask(masked, scaled=None, keys: int | None = None):
    """bool, ``masked``'s shape (a torch tensor or a NumPy array, as given): True where the mask hid the cell —
    ``masked`` (the softmax's input) is −∞, or is at least max(10³, ``keys``) below ``scaled`` (the scores before
    the mask; without them, at least 10³ + ``keys`` below 0).  ``keys``: how many keys each row holds (default
    ``masked``'s last dimension; give it when ``masked`` is a few cells picked from the rows).  The one definition of
    a hidden cell: the tracer's and ``explain_weight``'s."""
    keys = masked.shape[-1] if keys is None else keys
    # without the scaled scores the score is in ``masked`` too: 10³ for the score, one a key for a bias;
    # NaN (−∞ − −∞) compares False: −∞ is hidden below
    hidden = masked <= HIDDEN_AT - keys if scaled is None else masked - scaled <= min(HIDDEN_AT, -keys)
    return hidden | (masked == -float("inf"))


def window_band(n_queries: int, n_keys: int, window: int, *, causal: bool = True,
                positions=None) -> np.ndarray:
    """bool ``(n_queries, n_keys)``: True where a sliding window of ``window`` = W keys hides the key from the query.
    Query i sees keys i − W + 1 … i: a key W or more behind its query (i − j ≥ W) is hidden, and with ``causal`` a
    key after it (j > i) too.  ``positions``: each row's query position (default 0 … n_queries − 1), for rows that
    are not the first positions.  The one reading of a window's band from its W: every view that greys or drops the
    keys a window hides asks it (:func:`window_hidden` reads the cells a run hid from its scores instead)."""
    queries = np.arange(n_queries) if positions is None else np.asarray(positions)  # (q,)
    distance = queries[:, None] - np.arange(n_keys)[None, :]  # (q, k): i − j
    hidden = distance >= window  # (q, k)
    return hidden | (distance < 0) if causal else hidden


def window_hidden(masked: np.ndarray) -> np.ndarray:
    """bool, ``masked``'s shape: the cells a sliding window's run hid — every cell not finite in its softmax's input,
    the causal triangle's too (the window classes fill them with −∞).  The one reading of a window run's hidden
    cells: :meth:`Trace.hidden_cells`' and the Compare page's sliding-window map's."""
    return ~np.isfinite(masked)


TRACE_SOURCES = "attnviz.run, attnviz.trace_module or attnviz.load_trace"  # what gives a user a Trace


def require_trace(value, argument: str = "trace", *, error: type[InputError] = InputError, also: str = "") -> Trace:
    """``value`` when it is a Trace; else ``error`` (an InputError) naming the function's ``argument``, every place a
    Trace comes from and what came instead — "trace must be a Trace (from attnviz.run, attnviz.trace_module or
    attnviz.load_trace), got str." —, the one check of every function that takes a Trace (``explain_weight``,
    ``trace_npz``, ``show``, ``figures_of``).  ``also``: what else the argument may be ("a torch.nn.Module and a
    text")."""
    if isinstance(value, Trace):
        return value
    alternative = f" or {also}" if also else ""
    raise error(f"{argument} must be a Trace (from {TRACE_SOURCES}){alternative}, got {type(value).__name__}.")


def index_in(value, size: int, what: str, unit: str | None = None) -> int:
    """``value`` as one of 0 … size − 1 — a head (``unit`` "head"), a query or key (``unit`` "position") — or an
    InputError naming the range, in the words every reader of a Trace uses (``attention_map``, ``head_vectors``,
    ``explain_weight``, ``show``).  A negative index is refused: head −1 is not the last head."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(f"{what} must be a whole number from 0 to {size - 1}, got {value!r}.")
    if not 0 <= int(value) < size:
        raise InputError(f"{what} {int(value)} is out of range: this run has {amount(size, unit or what)}, choose "
                         f"{what} from 0 to {size - 1}.")
    return int(value)


def shape_problem(trace: Trace) -> str | None:
    """The shapes every Trace has, as one sentence saying the first one ``trace`` breaks (None: it has them all).

    With n tokens, batch b (1 but for ``trace_module`` on a batch) and h heads: every map (``attention.MAP_STAGES``) is
    ``weights``'s (b, h, n, n); every other step is (b, n, width) or per head (b, heads or K/V groups ≤ h, n,
    width); ``output`` (b, n, d_out); each embedding (n, d); a checkpoint's ``top_ids`` and ``top_probs`` the same
    (n, k).  Outside a user's module the config's ``num_heads`` are the maps' heads (1 for a one-head variant)."""
    n, weights = trace.n, trace.steps.get("weights")
    if weights is None or weights.ndim != 4 or weights.shape[-2:] != (n, n):
        return f"its weights {None if weights is None else tuple(weights.shape)} are not (batch, heads, {n}, {n})."
    b, h = weights.shape[:2]
    if b != 1 and trace.module_run is None:
        return f"its weights {tuple(weights.shape)} hold a batch of {b}; only a user module's trace has a batch."
    for name, step in trace.steps.items():
        if name in MAP_STAGES:
            if step.shape != weights.shape:
                return f"its {name} {tuple(step.shape)} and its weights {tuple(weights.shape)} differ in shape."
        elif step.ndim not in (3, 4) or step.shape[0] != b or step.shape[-2] != n or (step.ndim == 4 and (
                step.shape[1] > h or h % step.shape[1])):
            return (f"its {name} {tuple(step.shape)} is not (batch {b}, {n} tokens, width) or (batch {b}, heads, {n} "
                    f"tokens, width) beside weights of {h} heads.")
    if trace.output.ndim != 3 or trace.output.shape[:2] != (b, n):
        return f"its output {tuple(trace.output.shape)} is not (batch {b}, {n} tokens, width)."
    for name, embedding in trace.embeddings.items():
        if embedding.ndim != 2 or embedding.shape[0] != n:
            return f"its {name} embeddings {tuple(embedding.shape)} are not ({n} tokens, width)."
    if trace.model is not None and not (trace.model.top_ids.ndim == 2 and trace.model.top_ids.shape[0] == n
                                        and trace.model.top_probs.shape == trace.model.top_ids.shape):
        return (f"its top predictions {tuple(trace.model.top_ids.shape)} and {tuple(trace.model.top_probs.shape)} "
                f"are not one row per token ({n}).")
    if trace.module_run is None and h not in (1, trace.config.num_heads):
        return f"its config says {trace.config.num_heads} heads; its maps have {h}."
    return None


@functools.lru_cache(maxsize=8)
def pieces(token_ids: tuple[int, ...]) -> tuple[tokens.Token, ...]:
    return tuple(tokens.pieces(list(token_ids)))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """float32 NumPy view on the CPU, read-only: cached Traces are shared by every session."""
    array = tensor.detach().to("cpu", torch.float32).numpy()
    array.setflags(write=False)
    return array


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds  # NumPy 2 / 1


def trace_nbytes(trace: Trace) -> int:
    """Bytes held by a Trace's arrays; memory shared by several arrays (in eval mode ``dropped`` is
    ``weights``, a non-causal run's ``masked`` is ``scaled``) counts once."""
    extra = (trace.model.top_ids, trace.model.top_probs) if trace.model is not None else ()
    spans = sorted(_byte_bounds(array) for array in (*trace.steps.values(), *trace.embeddings.values(),
                                                        trace.output, *extra) if array.nbytes)
    total, end = 0, None
    for low, high in spans:  # the union of the arrays' byte ranges
        if end is None or low >= end:
            total, end = total + high - low, high
        elif high > end:
            total, end = total + high - end, high
    return total
