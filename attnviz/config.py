"""What a run asks for: ``AttentionConfig`` (variant, sizes, mask, dropout, seed, device, the modern variants'
K/V groups, latent width, window and positions, or a checkpoint's layer), its limits, the errors a user can fix,
and the devices this machine has.

Pure Python + torch: every producer of a Trace (:mod:`attnviz.producers`) reads a config from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnviz import variants
from attnviz.kv_cache import default_kv_heads, default_latent_dim

DEVICES = ("auto", "cpu", "cuda", "mps")

MAX_CONTEXT_LENGTH = 1024  # GPT-2's positional embedding has 1024 positions
MAX_DIM = 4096
MAX_HEADS = 64  # more heads than this cannot be told apart in a grid (GPT-2 XL has 25)
MAX_SEED = 2**32 - 1
MAX_CHARS = 40_000  # text beyond this is not tokenized (1024 tokens never need more in practice)
MAX_LAYERS = 128  # GPT-2 XL has 48
MAX_ATTENTIONS = MAX_LAYERS * MAX_HEADS  # a user's module: that many layers of one-head softmaxes each
POSITIONS = ("learned", "rotary")  # the book's chapter 2 positional embedding, or rotary q/k (attnviz.rope)
# rotary's θ bases a run takes (the sidebar and the URL offer attnviz.rope.ROPE_BASES): every published model's
# lies between (Qwen2 and Mistral 1,000,000, Yi 5,000,000); below 100 even a 128-wide head's slowest pair
# turns a radian or more every 100 tokens
ROPE_BASE_RANGE = (100, 1_000_000_000)


class InputError(ValueError):
    """Input a user can fix; the message says how."""


class ConfigError(InputError):
    """An invalid AttentionConfig."""


class SavedName(str):
    """A checkpoint or module as a saved trace file names it (``attnviz.load_trace``): what ran where the trace was
    made — a checkpoint's file or folder name, a listed module's label —, not a path or a module of this machine.
    It compares, hashes and shows as the plain name, so the views draw the trace as they drew it; a run refuses it
    (:func:`saved_name_refused`, which ``attnviz.producers.for_config`` asks) until the user names their own
    (``dataclasses.replace(trace.config, checkpoint=PATH)``): a shared file loads no file and runs no module here."""


def saved_name_refused(config: AttentionConfig) -> ConfigError | None:
    """The error a run of ``config`` raises when its checkpoint or module is a :class:`SavedName`; None otherwise."""
    if isinstance(config.checkpoint, SavedName):
        return ConfigError(
            f"This config was read from a trace file: its checkpoint={str(config.checkpoint)!r} names the checkpoint "
            "the trace was made with, not a file here, so attnviz loads nothing for it. To run it again, name your "
            "copy: dataclasses.replace(trace.config, checkpoint='path/to/it').")
    if isinstance(config.module, SavedName):
        return ConfigError(
            f"This config was read from a trace file: its module={str(config.module)!r} is the label of a module "
            "listed where the trace was made, so attnviz imports and runs nothing for it. To run it again with a "
            "module of yours, name it: dataclasses.replace(trace.config, module=LABEL) for one listed on your "
            "command line or in ATTNVIZ_MODULES, or attnviz.trace_module(module, trace.text).")
    return None


class EmptyTextError(InputError):
    """Nothing to tokenize."""


@dataclass(frozen=True)
class AttentionConfig:
    """The settings of one run: which attention runs, at which sizes, on which weights — the argument of
    ``attnviz.run`` and the app's cache key (frozen, so hashable).

    ``variant`` names one of the book's Chapter 3 classes or a bonus variant (:mod:`attnviz.variants`); ``d_in``,
    ``d_out``, ``num_heads`` and ``context_length`` are its sizes; ``seed`` seeds its weights and ``dropout``/``train``
    its dropout; ``causal`` hides the future.  ``checkpoint`` and ``layer`` run a GPT model's layer instead (its
    sizes come from the file), and ``module`` a user's own module.  ``num_kv_groups``, ``latent_dim`` and
    ``sliding_window_size`` apply to gqa, mla and swa; ``positions`` and ``rope_base`` choose learned or rotary
    positions.  Constructing one
    checks nothing: :meth:`validate` returns it, or raises :class:`ConfigError` with a message a user can act on
    (``attnviz.run`` calls it).
    """

    variant: str = variants.DEFAULT
    d_in: int = 768
    d_out: int = 768  # total output width; the wrapper gets d_out // num_heads per head
    num_heads: int = 12
    context_length: int = MAX_CONTEXT_LENGTH
    dropout: float = 0.0
    train: bool = False  # dropout active
    causal: bool = True
    qkv_bias: bool | None = None  # Q, K, V biases (None: the class's own: the book's False, a checkpoint's its file's)
    seed: int = 123
    device: str = "auto"
    embedding: str = "seeded"  # "book": the book's hand-set 3-d journey vectors when the text is the journey
    checkpoint: str | None = None  # a weights ref (attnviz.weights): run layer ``layer`` of that GPT model
    layer: int = 0  # which transformer block of the checkpoint (0 … layers − 1)
    module: str | None = None  # a user's own attention module, by the label it was listed under (attnviz.user_code)
    # which of the module's attentions the run shows, counted from 1 in the order its forward computes them (a model's
    # layers: attnviz.tracing.each_attention), as the checker names them ("attention 2 of 2")
    attention: int = 1
    num_kv_groups: int | None = None  # gqa: the NUMBER of K/V heads (None: kv_cache.default_kv_heads, 12 heads: 4)
    latent_dim: int | None = None  # mla: the latent's width (None: the book's max(16, d_out // 8), at most d_out)
    sliding_window_size: int | None = None  # swa: W, query i sees keys i−W+1 … i (None: every earlier key)
    positions: str = "learned"  # "rotary": q and k rotated, no learned positional embedding (mha, gqa, mqa, swa)
    rope_base: float = 10_000  # rotary's θ base: 10,000 (Llama 2), 500,000 (Llama 3), 1,000,000 (Qwen2, Mistral) …

    def validate(self) -> AttentionConfig:
        """Return self, or raise ConfigError with a message a user can act on."""
        if self.module is not None and (not isinstance(self.module, str) or not self.module):
            raise ConfigError(f"module must be the label of a listed module, got {self.module!r}.")
        if isinstance(self.attention, bool) or not isinstance(self.attention, int) or not (
                1 <= self.attention <= MAX_ATTENTIONS):
            raise ConfigError(f"attention must be a whole number from 1 to {MAX_ATTENTIONS} (which of a module's "
                              f"attentions to show, counted from 1), got {self.attention!r}.")
        if self.attention != 1 and self.module is None:
            raise ConfigError(f"attention={self.attention} picks one of your module's attentions; "
                              "the book's classes and a checkpoint's layer compute one.")
        if self.module is None and self.variant not in variants.VARIANTS:
            raise ConfigError(f"Unknown variant {self.variant!r}; choose one of {', '.join(variants.VARIANTS)}.")
        for name, low, high in (("d_in", 1, MAX_DIM), ("d_out", 1, MAX_DIM), ("context_length", 1, MAX_CONTEXT_LENGTH),
                                ("num_heads", 1, MAX_HEADS), ("seed", 0, MAX_SEED)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, got {value!r}.")
            if not low <= value <= high:
                raise ConfigError(f"{name} must be between {low} and {high}, got {value}.")
        self.validate_switches()
        dropout = self.dropout
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
            raise ConfigError(
                f"dropout is a probability: use a number from 0 up to (not including) 1, got {dropout!r}.")
        if self.device not in DEVICES:
            raise ConfigError(f"Unknown device {self.device!r}; choose one of {', '.join(DEVICES)}.")
        if self.embedding not in ("seeded", "book"):
            raise ConfigError(f"Unknown embedding {self.embedding!r}; choose 'seeded' or 'book'.")
        if self.embedding == "book" and self.d_in != 3:
            raise ConfigError(f"The book's journey vectors are 3-dimensional: set d_in to 3 (got {self.d_in}).")
        self.validate_checkpoint()
        self.validate_modern()
        if self.spec.multi_head and self.module is None:
            if self.num_heads > self.d_out:
                raise ConfigError(f"{self.num_heads} heads need d_out ≥ {self.num_heads}; d_out is {self.d_out}.")
            if self.d_out % self.num_heads:
                raise ConfigError(
                    f"d_out {self.d_out} is not divisible by {self.num_heads} heads; "
                    f"try {_or_list(nearest_divisors(self.d_out, self.num_heads))}."
                )
        return self

    def validate_switches(self) -> AttentionConfig:
        """Return self, or raise ConfigError when ``causal``, ``train`` or ``qkv_bias`` (None too: the class's own) is
        not True or False: a string such as ``"False"`` is truthy, so it is refused rather than guessed."""
        for name in ("causal", "train", "qkv_bias"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "qkv_bias" and value is None):
                raise ConfigError(f"{name} must be True or False, got {value!r}.")
        return self

    def validate_checkpoint(self) -> AttentionConfig:
        """Return self, or raise ConfigError when ``checkpoint`` or ``layer`` is not a reference and a layer number
        (or a yes/no setting is not a bool: :meth:`validate_switches`)."""
        self.validate_switches()
        if self.checkpoint is not None:
            if not isinstance(self.checkpoint, str) or not self.checkpoint:
                raise ConfigError(f"checkpoint must be a weights reference, got {self.checkpoint!r}.")
            if isinstance(self.layer, bool) or not isinstance(self.layer, int) or not 0 <= self.layer < MAX_LAYERS:
                raise ConfigError(f"layer must be a whole number from 0, got {self.layer!r}.")
        return self

    def validate_modern(self) -> AttentionConfig:
        """Return self, or raise ConfigError when K/V groups, latent width, window or positions cannot work."""
        for name, high in (("num_kv_groups", MAX_HEADS), ("latent_dim", MAX_DIM),
                           ("sliding_window_size", MAX_CONTEXT_LENGTH)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, got {value!r}.")
            if not 1 <= value <= high:
                raise ConfigError(f"{name} must be between 1 and {high}, got {value}.")
        if self.positions not in POSITIONS:
            raise ConfigError(f"Unknown positions {self.positions!r}; choose one of {', '.join(POSITIONS)}.")
        low, high = ROPE_BASE_RANGE
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, int | float) or not low <= base <= high:  # NaN: not between
            raise ConfigError(f"rope_base must be a number from {low:,} to {high:,} (10,000 Llama 2, 500,000 Llama 3, "
                              f"1,000,000 Qwen2 and Mistral), got {base!r}.")
        if self.module is not None or self.checkpoint is not None:
            return self
        spec = self.spec
        if self.rotary:
            if spec.not_applicable("positions"):
                raise ConfigError(f"{spec.label} has no rotary positions: {spec.not_applicable('positions')}")
            if self.num_heads <= self.d_out and self.d_out % self.num_heads == 0 and self.head_dim % 2:
                raise ConfigError(
                    f"Rotary positions turn pairs of dimensions: head_dim must be even, got {self.head_dim}.")
        if "num_kv_groups" in spec.settings and self.num_kv_groups is not None and self.num_heads % self.num_kv_groups:
            raise ConfigError(f"num_kv_groups {self.num_kv_groups} does not divide {self.num_heads} heads; "
                              f"try {_or_list(nearest_divisors(self.num_heads, self.num_kv_groups))}.")
        if "latent_dim" in spec.settings and self.latent_dim is not None and self.latent_dim > self.d_out:
            raise ConfigError(f"latent_dim {self.latent_dim} is wider than d_out {self.d_out}: a latent saves memory "
                              f"only when it is narrower; use at most {self.d_out}.")
        return self

    @property
    def kv_groups(self) -> int:
        """How many K/V heads the run's heads share: ``num_kv_groups`` for GQA (where it is None,
        :func:`attnviz.kv_cache.default_kv_heads`: grouped, 4 for 12 heads), 1 for MQA and single-head variants, one
        per head for the others (MHA, MLA, SWA)."""
        spec = self.spec
        if spec.kv_groups is not None:
            return spec.kv_groups
        if "num_kv_groups" in spec.settings:
            return self.num_kv_groups or default_kv_heads(self.num_heads)
        return self.heads

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without groups)."""
        return max(1, self.heads // self.kv_groups)

    def kv_group(self, head: int) -> int:
        """The K/V head (group) that query head ``head`` uses: heads 0 … group_size−1 use group 0, and so on
        (``repeat_interleave``).  IndexError outside 0 … heads−1."""
        if not 0 <= int(head) < self.heads:
            raise IndexError(f"head {head} out of range: this run has {self.heads} heads.")
        return int(head) // self.group_size

    @property
    def head_groups(self) -> tuple[int, ...]:
        """The K/V group of each head, in head order (``(0, 0, 0, 1, 1, 1, …)`` for 12 heads in 4 groups)."""
        return tuple(self.kv_group(head) for head in range(self.heads))

    def head_label(self, head: int) -> str:
        """``"head 5 · K/V group 1"`` where heads share K/V heads (GQA, MQA), else ``"head 5"``."""
        if self.kv_groups == self.heads:
            return f"head {int(head)}"
        return f"head {int(head)} · K/V group {self.kv_group(head)}"

    @property
    def latent_width(self) -> int | None:
        """MLA's latent width (the book's default ``max(16, d_out // 8)``, at most d_out); None for the others."""
        if "latent_dim" not in self.spec.settings:
            return None
        return self.latent_dim or default_latent_dim(self.d_out)

    @property
    def window(self) -> int | None:
        """SWA's window W (None: no window); None for the other variants."""
        return self.sliding_window_size if "sliding_window_size" in self.spec.settings else None

    @property
    def hides_future(self) -> bool:
        """Whether the run keeps every query from later keys: the causal mask is on, or the variant always masks
        (sliding window).  A user module's ``causal`` is what its probe run showed (``tracing.infer_causal``)."""
        if self.causal:
            return True
        return self.module is None and self.checkpoint is None and self.spec.not_applicable("causal") is not None

    @property
    def rotary(self) -> bool:
        return self.positions == "rotary"

    @property
    def rotary_base(self) -> int | None:
        """The θ base queries and keys are rotated with, or None (learned positions)."""
        return self.rope_base if self.rotary else None

    @property
    def spec(self) -> variants.Variant:
        """This config's record in the variant registry (a checkpoint's layer: ``variants.checkpoint_record``; a user's
        module: ``variants.USER_MODULE``)."""
        if self.module is not None:
            return variants.USER_MODULE
        return variants.checkpoint_record(self.variant) if self.checkpoint is not None else variants.get(self.variant)

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


def fitted_heads(d_out: int, num_heads: int, near: int | None = None) -> int:
    """The heads a run of width ``d_out`` takes for ``num_heads``: those where they divide ``d_out`` (head_dim =
    d_out / heads), else the divisor of ``d_out`` nearest ``near`` (``num_heads`` when not given; of two as near, the
    smaller): the rule the sidebar, a URL and the Compare page fit their heads by."""
    if d_out % num_heads == 0:
        return num_heads
    return nearest_divisors(d_out, num_heads if near is None else near, 1)[0]


def _or_list(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def preset_config(preset: str, **overrides) -> AttentionConfig:
    """AttentionConfig for a size preset of the registry (``gpt2-small`` …, or ``book``, the book's toy example).

    ``overrides`` win over the preset.  The preset's heads and output width go only where the variant has them (a
    single-head class runs one head, the simplified class is d_in wide), so its run ignores nothing it is given.
    The book preset masks only the variants the book masks (causal, wrapper, MHA) and seeds each class as its
    listing does (``Variant.book_seed``: 789 for SelfAttention_v2, 123 for the others), and gives the wrapper its
    listing's d_out per head (``variants.Preset.sizes``: 2 heads × 2), so every variant reproduces the book's printed
    tensors by default.
    """
    if preset not in variants.PRESETS:
        raise ConfigError(f"Unknown preset {preset!r}; choose one of {', '.join(variants.PRESETS)}.")
    size = variants.PRESETS[preset]
    variant = overrides.get("variant", AttentionConfig.variant)
    spec = variants.get(variant) if variant in variants.VARIANTS else None  # else validate() names the unknown one
    d_in, d_out, num_heads = size.sizes(spec)
    values = {"d_in": d_in, "d_out": d_out, "num_heads": num_heads}
    if spec is not None:
        values.update(d_out=spec.out_width(d_in, d_out), num_heads=spec.head_count(num_heads))
    if size.book and spec is not None:
        values.update(embedding="book", causal=spec.book_causal, seed=spec.book_seed)
    return AttentionConfig(**{**values, **overrides})




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


