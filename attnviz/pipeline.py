"""text + AttentionConfig -> Trace: everything the app draws comes from one ``run()``.

With ``AttentionConfig.checkpoint`` (a ref from :mod:`attnviz.weights`: a discovered path or a session model's
opaque id, never a string from a browser) the Trace is layer ``layer`` of that GPT model: the same named
steps from the LayerNorm'd block input, the whole model's path in ``Trace.model.path`` and its top-5
next-token predictions at every position.  Each block's input of the last few (tokens, checkpoint, causal)
runs is kept, so another layer of the same text reruns one block (:func:`attnviz.models.switch_layer`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from attnviz import attention, embedding, models, tokens, variants, weights

# Compatibility views of the registry (attnviz.variants is the one place a variant or preset is defined; core
# code reads the registry, these names stay for older callers)
VARIANTS = variants.LABELS  # name -> label (the same dict: variants.register() updates it)
MULTI_HEAD_VARIANTS = tuple(name for name, v in variants.VARIANTS.items() if v.multi_head)
DROPOUT_VARIANTS = tuple(name for name, v in variants.VARIANTS.items() if v.dropout)
DEVICES = ("auto", "cpu", "cuda", "mps")

MAX_CONTEXT_LENGTH = 1024  # GPT-2's positional embedding has 1024 positions
MAX_DIM = 4096
MAX_HEADS = 64  # more heads than this cannot be told apart in a grid (GPT-2 XL has 25)
MAX_SEED = 2**32 - 1
MAX_CHARS = 40_000  # text beyond this is not tokenized (1024 tokens never need more in practice)
MAX_LAYERS = 128  # GPT-2 XL has 48
LAYER_RUNS_MB = int(os.environ.get("ATTNVIZ_LAYER_RUNS_MB", "512"))  # block inputs kept for fast layer switches


class InputError(ValueError):
    """Input a user can fix; the message says how."""


class ConfigError(InputError):
    """An invalid AttentionConfig."""


class EmptyTextError(InputError):
    """Nothing to tokenize."""


@dataclass(frozen=True)
class AttentionConfig:
    variant: str = variants.DEFAULT
    d_in: int = 768
    d_out: int = 768  # total output width; the wrapper gets d_out // num_heads per head
    num_heads: int = 12
    context_length: int = MAX_CONTEXT_LENGTH
    dropout: float = 0.0
    train: bool = False  # dropout active
    causal: bool = True
    qkv_bias: bool = False
    seed: int = 123
    device: str = "auto"
    embedding: str = "seeded"  # "book": the book's hand-set 3-d journey vectors when the text is the journey
    checkpoint: str | None = None  # a weights ref (attnviz.weights): run layer ``layer`` of that GPT model
    layer: int = 0  # which transformer block of the checkpoint (0 … layers − 1)

    def validate(self) -> AttentionConfig:
        """Return self, or raise ConfigError with a message a user can act on."""
        if self.variant not in variants.VARIANTS:
            raise ConfigError(f"Unknown variant {self.variant!r}; choose one of {', '.join(variants.VARIANTS)}.")
        for name, low, high in (("d_in", 1, MAX_DIM), ("d_out", 1, MAX_DIM), ("context_length", 1, MAX_CONTEXT_LENGTH),
                                ("num_heads", 1, MAX_HEADS), ("seed", 0, MAX_SEED)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, got {value!r}.")
            if not low <= value <= high:
                raise ConfigError(f"{name} must be between {low} and {high}, got {value}.")
        dropout = self.dropout
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout is a probability: use a number from 0 up to (not including) 1, got {dropout!r}.")
        if self.device not in DEVICES:
            raise ConfigError(f"Unknown device {self.device!r}; choose one of {', '.join(DEVICES)}.")
        if self.embedding not in ("seeded", "book"):
            raise ConfigError(f"Unknown embedding {self.embedding!r}; choose 'seeded' or 'book'.")
        if self.embedding == "book" and self.d_in != 3:
            raise ConfigError(f"The book's journey vectors are 3-dimensional: set d_in to 3 (got {self.d_in}).")
        if self.checkpoint is not None:
            if not isinstance(self.checkpoint, str) or not self.checkpoint:
                raise ConfigError(f"checkpoint must be a weights reference, got {self.checkpoint!r}.")
            if isinstance(self.layer, bool) or not isinstance(self.layer, int) or not 0 <= self.layer < MAX_LAYERS:
                raise ConfigError(f"layer must be a whole number from 0, got {self.layer!r}.")
        if self.spec.multi_head:
            if self.num_heads > self.d_out:
                raise ConfigError(f"{self.num_heads} heads need d_out ≥ {self.num_heads}; d_out is {self.d_out}.")
            if self.d_out % self.num_heads:
                raise ConfigError(
                    f"d_out {self.d_out} is not divisible by {self.num_heads} heads; "
                    f"try {_or_list(nearest_divisors(self.d_out, self.num_heads))}."
                )
        return self

    @property
    def spec(self) -> variants.Variant:
        """This config's record in the variant registry (a checkpoint's layer: ``variants.CHECKPOINT``)."""
        return variants.CHECKPOINT if self.checkpoint is not None else variants.get(self.variant)

    @property
    def heads(self) -> int:
        """Heads in the attention maps (1 for the single-head variants)."""
        return self.spec.head_count(self.num_heads)

    @property
    def head_dim(self) -> int:
        if self.spec.weights is None:
            return self.d_in
        return self.d_out // self.heads

    @property
    def dropout_runs(self) -> bool:
        return self.train and self.dropout > 0 and self.spec.dropout

    @property
    def effective_dropout(self) -> float:
        """p when dropout actually ran in this run, else 0 (kept weights are scaled by 1/(1−p))."""
        return self.dropout if self.dropout_runs else 0.0


def divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def nearest_divisors(number: int, wanted: int, count: int = 3) -> list[int]:
    """The ``count`` divisors of ``number`` closest to ``wanted``, ascending."""
    closest = sorted(divisors(number), key=lambda d: (abs(d - wanted), d))[:count]
    return sorted(closest)


def _or_list(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def preset_config(preset: str, **overrides) -> AttentionConfig:
    """AttentionConfig for a size preset of the registry (``gpt2-small`` …, or ``book``, the book's toy example).

    ``overrides`` win over the preset.  The book preset masks only the variants the book masks
    (causal, wrapper, MHA), so every variant reproduces the book's printed tensors by default.
    """
    if preset not in variants.PRESETS:
        raise ConfigError(f"Unknown preset {preset!r}; choose one of {', '.join(variants.PRESETS)}.")
    size = variants.PRESETS[preset]
    values = {"d_in": size.d_in, "d_out": size.d_out, "num_heads": size.num_heads}
    if size.book:
        variant = overrides.get("variant", AttentionConfig.variant)
        values.update(embedding="book", causal=variants.get(variant).book_causal)
    return AttentionConfig(**{**values, **overrides})


@dataclass(frozen=True, eq=False)  # holds arrays
class ModelRun:
    """What a checkpoint's run adds to its Trace: where the layer sits, the whole path, the predictions."""

    layer: int
    n_layers: int
    path: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape): tokens, tok_emb, pos_emb, input, blocks…, logits
    top_ids: np.ndarray  # (n, 5) int64: the model's most likely next tokens after each position
    top_probs: np.ndarray  # (n, 5) float32, descending per row


@dataclass(frozen=True)
class Trace:
    """One run, ready to draw.  Arrays are float32 NumPy on the CPU; treat them as read-only."""

    config: AttentionConfig
    text: str  # the text that was tokenized (after bounding/cleaning; see notes)
    tokens: tuple[str, ...]  # display pieces, e.g. "·journey"
    token_ids: tuple[int, ...]
    token_details: tuple[tokens.Token, ...]  # pieces with character offsets and special flags
    embeddings: dict[str, np.ndarray]  # "token", "position", "input": (n, d_in) each
    steps: dict[str, np.ndarray]  # named intermediates (attention.STAGES); maps are (1, heads, n, n)
    output: np.ndarray  # (1, n, d_out)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (stage, shape) in pipeline order, from real tensors
    device: str  # the device that actually ran
    notes: tuple[str, ...] = field(default=())  # things the user should know (truncation, fallback)
    model: ModelRun | None = None  # set when the run used a checkpoint

    @property
    def n(self) -> int:
        return len(self.token_ids)

    @property
    def num_heads(self) -> int:
        return self.steps["weights"].shape[1]

    def attention_map(self, stage: str, head: int) -> np.ndarray:
        """(n, n) map of ``stage`` for one head."""
        return self.steps[stage][0, head]


def available_devices() -> list[str]:
    """Devices present on this machine, ``auto`` first."""
    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(requested: str) -> tuple[str, list[str]]:
    """(device to use, notes): ``auto`` picks CUDA, then MPS, then CPU; missing devices fall back to CPU."""
    present = available_devices()
    if requested == "auto":
        return next(d for d in ("cuda", "mps", "cpu") if d in present), []
    if requested not in present:
        return "cpu", [f"{requested.upper()} is not available on this machine; ran on the CPU instead."]
    return requested, []


def build_module(config: AttentionConfig) -> torch.nn.Module:
    """The book class for ``config`` (call right after ``torch.manual_seed`` to get the book's weights)."""
    return config.spec.build(config)


# torch's global RNG (seeding, dropout) is shared by all Streamlit sessions' threads.  Every section that seeds
# it or draws from it goes through seeded() (re-entrant: a seeded section may call code that takes it again).
RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded(seed: int | None = None, rng_state: torch.Tensor | None = None) -> Iterator[None]:
    """Hold torch's global RNG for this thread: seed it with ``seed`` (or restore ``rng_state``) on entry.

    Wrap every creation of seeded modules (the book's parameter-creation order needs the global seed)
    and every forward whose dropout is active; an eval-mode forward draws no random numbers and must not
    take it (it would serialise every session).  ``seeded()`` with neither argument only holds the lock.
    """
    with RNG_LOCK:
        if rng_state is not None:
            torch.set_rng_state(rng_state)
        elif seed is not None:
            torch.manual_seed(seed)
        yield


def _built_once(maxsize: int):
    """A bounded cache for builders that draw from the seeded RNG (like ``functools.lru_cache``, with
    ``cache_clear``).  A hit takes no lock; a miss builds under ``RNG_LOCK`` — which the builders take
    anyway — and looks again first, so threads that miss on the same key at once (a page's first run beside
    the server's warm-up, :func:`prepare`) build it once.  Evicts the oldest entry."""
    def wrap(build):
        built: collections.OrderedDict = collections.OrderedDict()

        @functools.wraps(build)
        def get(*args):
            found = built.get(args)
            if found is not None:
                return found
            with RNG_LOCK:
                if args not in built:
                    built[args] = build(*args)
                    while len(built) > maxsize:
                        built.popitem(last=False)
                return built[args]

        get.cache_clear = built.clear
        return get

    return wrap


@_built_once(maxsize=1)  # 50257 × d_in floats: 154 MB at 768, 322 MB at 1600
def _embedding_layer(d_in: int, context_length: int, seed: int) -> embedding.InputEmbedding:
    with seeded(seed):
        return embedding.InputEmbedding(d_in, context_length)


def _module_config(config: AttentionConfig) -> AttentionConfig:
    """What the module depends on: a training-mode module (dropout runs) and an eval-mode one are cached apart."""
    return replace(config, train=config.dropout_runs, device="auto", embedding="seeded")


def prepare(config: AttentionConfig) -> None:
    """Build what the first run of ``config`` needs — the tokenizer, the seeded embedding table and module —
    so that run finds them built (the server's warm-up calls this in a thread while the first page is still
    importing; ~0.2 s at GPT-2 small, mostly the 50257 × d_in table)."""
    tokens.get_encoding()
    config.validate()
    if config.checkpoint is None:
        device, _ = resolve_device(config.device)
        _embedding_layer(config.d_in, config.context_length, config.seed)
        _seeded_module(_module_config(config), device)


@_built_once(maxsize=4)
def _seeded_module(module_config: AttentionConfig, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """(module on ``device``, RNG state right after its creation, so dropout replays the book's draws).

    Its mode is set here, once, from ``module_config.train`` (true only when dropout runs): a module shared by
    sessions is never switched between train and eval, so an eval-mode forward needs no lock."""
    with seeded(module_config.seed):
        module = build_module(module_config)  # created on the CPU: the same weights on every device
        rng_state = torch.get_rng_state()
    return module.to(device).train(module_config.train), rng_state


def clean_text(text: str) -> tuple[str, list[str]]:
    """(the text that will be tokenized, notes): bounded to MAX_CHARS, lone surrogates replaced.

    Cheap (no tokenizing) and idempotent: it is the trace cache's key, so a Trace is found again by its
    own ``Trace.text``.  Raises InputError for a non-string and EmptyTextError for blank text."""
    notes = []
    if not isinstance(text, str):
        raise InputError(f"Text must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise EmptyTextError("Type some text to see its attention (the text is empty or only whitespace).")
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS]
        notes.append(f"Only the first {MAX_CHARS:,} characters were tokenized.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
        notes.append("The text contained invalid Unicode (lone surrogates); they were replaced with '?'.")
    return text, notes


def prepare_text(text: str, context_length: int) -> tuple[str, list[int], list[str]]:
    """(text to tokenize, its token ids ≤ context_length, notes); raises EmptyTextError."""
    text, notes = clean_text(text)
    token_ids = tokens.encode(text)
    if len(token_ids) > context_length:
        notes.append(
            f"The text has {len(token_ids):,} tokens; only the first {context_length:,} "
            f"(the context length) are shown."
        )
        token_ids = token_ids[:context_length]
    return text, token_ids, notes


def run(text: str, config: AttentionConfig) -> Trace:
    """Tokenize, embed and run the configured attention, recording every named intermediate."""
    config.validate()
    if config.checkpoint is not None:
        return _run_checkpoint(text, config)
    text, token_ids, notes = prepare_text(text, config.context_length)
    return _run_tokens(text, token_ids, notes, config)


def run_ids(token_ids, config: AttentionConfig) -> Trace:
    """``run()`` on token ids instead of text (the induction lab's repeated random tokens): the same seeded
    embedding and module as every page shows for ``config``.  The book's classes only (a checkpoint's
    layer runs on text); raises InputError for ids outside GPT-2's vocabulary or the context length."""
    config.validate()
    if config.checkpoint is not None:
        raise ConfigError("run_ids runs the book's classes; a checkpoint's layer runs from text (run()).")
    token_ids = [int(token) for token in token_ids]
    if not 1 <= len(token_ids) <= config.context_length:
        raise InputError(f"Expected 1 to {config.context_length} token ids, got {len(token_ids)}.")
    if min(token_ids) < 0 or max(token_ids) >= tokens.N_VOCAB:
        raise InputError(f"Token ids must be in 0…{tokens.N_VOCAB - 1}.")
    return _run_tokens(tokens.decode(token_ids), token_ids, [], config)


def _run_tokens(text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace:
    device, device_notes = resolve_device(config.device)
    notes += device_notes

    input_embeddings, embeddings = _embed(token_ids, config, notes)
    try:
        recorder, output = _forward(input_embeddings, config, device)
    except torch.cuda.OutOfMemoryError:
        notes.append(f"{device.upper()} ran out of memory; ran on the CPU instead.")
        device = "cpu"
        recorder, output = _forward(input_embeddings, config, device)

    return _trace(config, text, token_ids, embeddings,
                  steps={name: _to_numpy(value) for name, value in recorder.steps.items()},
                  output=_to_numpy(output),
                  shapes=(("input", tuple(input_embeddings.shape)), *recorder.shapes),
                  device=device, notes=notes)


def _trace(config: AttentionConfig, text: str, token_ids: list[int], embeddings: dict, *, steps: dict,
           output: np.ndarray, shapes: tuple, device: str, notes: list[str], model: ModelRun | None = None) -> Trace:
    """A Trace of these tokens: the display pieces are derived here, the same for every run of the same ids."""
    details = _pieces(tuple(token_ids))
    return Trace(config=config, text=text, tokens=tuple(t.piece for t in details), token_ids=tuple(token_ids),
                 token_details=details, embeddings=embeddings, steps=steps, output=output, shapes=shapes,
                 device=device, notes=tuple(notes), model=model)


def _embed(token_ids: list[int], config: AttentionConfig, notes: list[str]):
    if config.embedding == "book":
        if tuple(token_ids) == embedding.JOURNEY_TOKEN_IDS:
            inputs = embedding.journey_inputs()  # (6, 3)
            zeros = torch.zeros_like(inputs)  # (6, 3)
            arrays = {"token": _to_numpy(inputs), "position": _to_numpy(zeros), "input": _to_numpy(inputs)}
            return inputs.unsqueeze(0), arrays
        notes.append(
            f"The book's hand-set 3-d vectors exist only for {embedding.JOURNEY_TEXT!r}; "
            "this text uses seeded embeddings."
        )
    layer = _embedding_layer(config.d_in, config.context_length, config.seed)
    with torch.no_grad():
        parts = layer(torch.tensor([token_ids]))  # (1, n) -> (1, n, d_in) each
    arrays = {"token": _to_numpy(parts["token"][0]), "position": _to_numpy(parts["position"]),
              "input": _to_numpy(parts["input"][0])}
    return parts["input"], arrays


def _forward(input_embeddings: torch.Tensor, config: AttentionConfig, device: str):
    module, rng_state = _seeded_module(_module_config(config), device)
    recorder = attention.Recorder()
    # only a forward whose dropout runs draws random numbers: only that one holds the RNG (from the seed's state)
    rng = seeded(rng_state=rng_state) if config.dropout_runs else contextlib.nullcontext()
    with rng, torch.inference_mode():
        if config.dropout_runs and device == "cuda":
            torch.cuda.manual_seed_all(config.seed)
        output = module(input_embeddings.to(device), recorder)  # (1, n, d_in) -> (1, n, d_out)
    return recorder, output


# ============================== a checkpoint's layer ==============================

_layer_runs_lock = threading.Lock()
_layer_runs: collections.OrderedDict[tuple, tuple[object, int]] = collections.OrderedDict()  # -> (LayerTrace, bytes)


def _run_checkpoint(text: str, config: AttentionConfig) -> Trace:
    model = weights.load(config.checkpoint)  # CheckpointError (a ValueError) says what is wrong with the file
    sizes = weights.sizes(model)
    expected = (sizes.emb_dim, sizes.emb_dim, sizes.num_heads, min(sizes.context_length, MAX_CONTEXT_LENGTH))
    if (config.d_in, config.d_out, config.num_heads, config.context_length) != expected:
        raise ConfigError(f"This checkpoint has width {sizes.emb_dim}, {sizes.num_heads} heads and "
                          f"{sizes.context_length} positions; the settings say otherwise (reload the page).")
    if config.layer >= sizes.n_layers:
        raise ConfigError(f"This checkpoint has {sizes.n_layers} layers: choose a layer from 0 to {sizes.n_layers - 1}.")
    text, token_ids, notes = prepare_text(text, config.context_length)
    layer_trace = _layer_trace(model, config, token_ids)
    steps = {name: _to_numpy(value) for name, value in layer_trace.steps.items()}  # norm1 + the ten stages
    with torch.no_grad():
        ids = torch.tensor(token_ids)  # (n,)
        token_rows = model.tok_emb.weight[ids]  # (vocab, d)[(n,)] -> (n, d): the checkpoint's wte rows
        position_rows = model.pos_emb.weight[: len(token_ids)]  # (n, d): its wpe rows
        embeddings = {"token": _to_numpy(token_rows), "position": _to_numpy(position_rows),
                      "input": _to_numpy(token_rows + position_rows)}  # (n, d) each
    block = [(name, shape) for name, shape in layer_trace.recorder.shapes]
    names = [name for name, _ in block]
    attention_shapes = block[names.index("queries") : names.index("output") + 1]  # what att records
    top_ids = layer_trace.top_ids.copy()
    top_probs = layer_trace.top_probs.copy()
    top_ids.setflags(write=False)
    top_probs.setflags(write=False)
    return _trace(config, text, token_ids, embeddings, steps=steps, output=steps["output"],
                  shapes=(("input", dict(block)["norm1"]), *attention_shapes),  # the attention reads norm1(block input)
                  device="cpu", notes=notes,
                  model=ModelRun(layer=config.layer, n_layers=sizes.n_layers, path=tuple(layer_trace.path),
                                 top_ids=top_ids, top_probs=top_probs))


@functools.lru_cache(maxsize=8)
def _pieces(token_ids: tuple[int, ...]) -> tuple[tokens.Token, ...]:
    return tuple(tokens.pieces(list(token_ids)))


def _layer_trace(model, config: AttentionConfig, token_ids: list[int]):
    """``models.trace_layer``, or ``models.switch_layer`` from the block inputs kept for these tokens."""
    key = (config.checkpoint, config.causal, tuple(token_ids))
    with _layer_runs_lock:
        kept = _layer_runs.get(key)
        if kept is not None:
            _layer_runs.move_to_end(key)
    if kept is not None:
        return models.switch_layer(model, kept[0], config.layer)
    layer_trace = models.trace_layer(model, token_ids, config.layer, causal=config.causal)
    shapes_only = attention.Recorder()
    shapes_only.shapes = list(layer_trace.recorder.shapes)
    light = replace(layer_trace, recorder=shapes_only)  # block inputs, predictions, path: not the maps
    size = light.block_inputs.numel() * light.block_inputs.element_size()
    with _layer_runs_lock:
        _layer_runs[key] = (light, size)
        while len(_layer_runs) > 1 and sum(s for _, s in _layer_runs.values()) > LAYER_RUNS_MB * 2**20:
            _layer_runs.popitem(last=False)
    return layer_trace


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
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


def estimate_nbytes(text: str, config: AttentionConfig) -> int:
    """About what ``run(text, config)`` will hold: five float32 (heads, n, n) maps (0 if the text is invalid)."""
    try:
        n = len(prepare_text(text, config.context_length)[1])
    except InputError:
        return 0
    return 5 * config.heads * n * n * 4


class _InFlight:
    """A run another session started for the same key: wait for its Trace (or its error)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.trace: Trace | None = None
        self.error: BaseException | None = None


class TraceCache:
    """A thread-safe LRU cache of Traces bounded by bytes, not entries: at n = 1024 one GPT-2-small
    Trace holds ~210 MB and one XL Trace ~430 MB, while a six-token Trace holds kilobytes.

    Keyed by the text that is tokenized (:func:`clean_text`), so a 50,000-character paste and its
    40,000-character ``Trace.text`` are one entry.  Sessions that miss on a key another session is
    computing wait for that run instead of starting their own."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._traces: collections.OrderedDict[tuple, tuple[Trace, int]] = collections.OrderedDict()
        self._running: dict[tuple, _InFlight] = {}
        self._lock = threading.Lock()
        self.misses = 0  # how many get() calls had to run

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._traces.values())

    def __len__(self) -> int:
        return len(self._traces)

    def get(self, text: str, config: AttentionConfig) -> Trace:
        key = (clean_text(text)[0], config)
        with self._lock:
            if key in self._traces:
                self._traces.move_to_end(key)
                return self._traces[key][0]
            flight = self._running.get(key)
            owner = flight is None
            if owner:
                flight = self._running[key] = _InFlight()
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.trace
        try:
            # Make room *before* running: the run's own tensors plus the cache must stay within the bound, or
            # the server's peak holds a full cache and a large new trace at once.
            self._evict(reserve=estimate_nbytes(text, config))
            trace = run(text, config)  # outside the lock: other sessions keep reading
        except BaseException as exc:
            flight.error = exc
            raise
        else:
            flight.trace = trace
            with self._lock:
                self.misses += 1
                self._traces[key] = (trace, trace_nbytes(trace))
                self._traces.move_to_end(key)
            self._evict(reserve=0, keep=1)
            return trace
        finally:
            with self._lock:
                self._running.pop(key, None)
            flight.done.set()

    def _evict(self, reserve: int, keep: int = 0) -> None:
        """Drop least recently used traces until they and ``reserve`` bytes fit (always keep ``keep``)."""
        with self._lock:
            while len(self._traces) > keep and sum(size for _, size in self._traces.values()) + reserve > self.max_bytes:
                self._traces.popitem(last=False)
