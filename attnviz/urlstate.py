"""Settings <-> URL <-> AttentionConfig: the sidebar's values, their defaults, parsing URL parameters
(invalid ones ignored with a notice) and the link that reproduces a view.  Pure Python: no Streamlit."""

from __future__ import annotations

import functools
import re
import urllib.parse

from attnviz import config as configs
from attnviz import pipeline, tokens, user_code, variants, weights
from attnviz.config import (
    MAX_ATTENTIONS,
    MAX_CONTEXT_LENGTH,
    MAX_DIM,
    MAX_HEADS,
    MAX_SEED,
    AttentionConfig,
    available_devices,
    fitted_heads,
    resolve_device,
)
from attnviz.kv_cache import default_kv_heads
from attnviz.rope import ROPE_BASES
from attnviz.text import clean_text
from attnviz.words import CLIPPED_LENGTH, amount, clipped

DEFAULT_TEXT = "Your journey starts with one step"
PRESETS = variants.PRESET_LABELS  # name -> label, "custom" last
PRESET_DIMS = {name: preset.dims for name, preset in variants.PRESETS.items()}  # the presets' own (a checkpoint's)
DEFAULTS = {
    "text": DEFAULT_TEXT,
    "weights": weights.BOOK,  # an option's listed name (attnviz.weights), never a path
    "layer": 0,
    "attention": 1,  # which of a user's module's attentions, counted from 1 (tracing.each_attention)
    "variant": variants.DEFAULT,
    "preset": "gpt2-small",
    "d_in": 768,
    "d_out": 768,
    "num_heads": 12,
    "causal": True,
    "dropout": 0.1,
    "train": False,
    "seed": 123,
    "device": "auto",
    "num_kv_groups": 4,  # gqa: K/V heads (12 heads in 4 groups of 3)
    "latent_dim": 96,  # mla: the book's max(16, d_out // 8) at d_out 768
    "sliding_window_size": 4,  # swa: a window a short text shows as a band
    "positions": "learned",
    "rope_base": 10_000,
}
# the notice on a link's attention for the book's classes or a checkpoint
ONE_ATTENTION = ("it picks one of the attentions of a module of yours (--module); the book's classes compute one, and "
                 "a checkpoint's attentions are its layers (Layer); showing attention 1.")
# AttentionConfig's settings the app does not offer, with what runs instead (a link may carry one written by hand)
NOT_SETTINGS = {
    "qkv_bias": "the app has no setting for biases in W_query, W_key and W_value. The book's classes run without "
                "them (the book's qkv_bias=False); a checkpoint runs with its own, as it was trained (GPT-2 has "
                "them).",
}
SETTING_KEYS = tuple(DEFAULTS)  # defaults(): the variant is a module the command line names, if any
WEIGHTS_SIZES = variants.CHECKPOINT_SIZES  # a checkpoint's own: the sidebar sets them from its file
FITTED = ("num_kv_groups", "latent_dim", "positions")  # what fit_modern fits to the sizes
BOOK_SIZES = (*WEIGHTS_SIZES, *FITTED)  # the book's classes' sizes and what follows from them: the user's own
HEAD, STAGE, ROW, COL = "head", "stage", "row", "col"  # the Heads and Steps pages' focused head, stage and window
CELL = "cell"  # the Heads page's clicked cell of the focused map ("5,2": query 5, key 2), as "why this weight" has it
PAIR = "pair"  # the Steps page's pair of dimensions (d, d + head_dim/2) that its "rotate q, k" stage draws
MAP_OF = (HEAD, STAGE, ROW, COL)  # with the settings, what decides the focused map: a change drops the cell (CELL)
MAP = "map"  # the Compare page's "Heatmap shows"
BUG, TOKEN = "bug", "token"  # the Pitfall lab's bug and perturbed token
REPEAT, TOKEN_SEED = "T", "token_seed"  # the Induction lab's repeat length and the seed of its random tokens (and head)
KNOCKOUT = "knockout"  # the Induction lab's heads knocked out together ("L0H1,L1H0")
# Generate's (and head); map_layer, the layer of a page's own map (not the sidebar's layer), the Induction lab's too
NEW_TOKENS, RANDOM, MAP_LAYER, STEP = "new_tokens", "random", "map_layer", "step"
SIZES, DTYPE = "sizes", "dtype"  # Generate's cost chart: a real model's sizes (a preset's name) and the bytes' dtype
TRAIN_STEPS, TRAIN_SEED = "train_steps", "train_seed"  # the Train page's (seed, step: the sidebar's, Generate's)
# in a page's ``also`` (the settings its work runs whatever the class): it runs the book's classes whatever the
# weights (``ui.navigation.PageEntry.book_classes``), so with a checkpoint every setting of theirs makes its view
BOOK_CLASSES = "book classes"
# pages' own URL parameters: not settings; the shown page's kept
PAGE_PARAMS = (NEW_TOKENS, HEAD, STAGE, ROW, COL, CELL, PAIR, MAP, BUG, TOKEN, REPEAT, TOKEN_SEED, KNOCKOUT, RANDOM,
               MAP_LAYER, STEP, SIZES, DTYPE, TRAIN_STEPS, TRAIN_SEED)
# The text's length in the URL, percent-encoded (a non-ASCII character takes 6–12 bytes): the server (uvicorn's h11)
# reads a request's line and headers only up to 16 KiB; this leaves room for the other parameters and the browser's
# headers and cookies, and holds a typical 1,024-token English text (4–6 kB).  A longer text is not put in the URL.
MAX_URL_TEXT_BYTES = 12_000
# The mark a URL holds in place of a text left out of it (``text_left_out=1``): a reload or the link opens the default
# sentence, and the sidebar says that the text was too long to keep in the link.  Not a setting: it says nothing the
# URL's other parameters do not, and a link without it (an older one) means what it always did.
TEXT_LEFT_OUT = "text_left_out"


def url_text_fits(text: str) -> bool:
    """Whether ``text`` goes in a URL: its percent-encoded length (as a link writes it) is within
    :data:`MAX_URL_TEXT_BYTES`."""
    return len(urllib.parse.quote_plus(text)) <= MAX_URL_TEXT_BYTES


@functools.lru_cache(maxsize=8)  # every run asks for the session's text several times; tokenizing 40,000 characters
def url_text(text: str) -> str | None:  # takes milliseconds
    """The text a URL and a link hold for the setting ``text``: the text itself where it fits
    (:func:`url_text_fits`); else, for a text longer than the most a page shows (``MAX_CONTEXT_LENGTH`` tokens), the
    part shown — the text up to the end of its first ``MAX_CONTEXT_LENGTH`` tokens (and of a character they end in
    the middle of), which gives those tokens again — where that fits; else None (the URL and the link leave the text
    out).  The session keeps the whole text."""
    if url_text_fits(text):
        return text
    shown = shown_part(text)
    return shown if len(shown) < len(text) and url_text_fits(shown) else None


def shown_part(text: str) -> str:
    """The start of ``text`` that a page shows: up to the end of its first ``MAX_CONTEXT_LENGTH`` tokens and of the
    character the last of them ends in (the text as :func:`attnviz.text.clean_text` bounds it; the whole text when
    it has no more tokens)."""
    cleaned = clean_text(text)[0] if text.strip() else text
    ids = tokens.encode(cleaned)
    if len(ids) <= MAX_CONTEXT_LENGTH:
        return cleaned
    whole = cleaned.encode("utf-8")  # GPT-2's tokens are its bytes, in order
    end = sum(len(piece) for piece in tokens.get_encoding().decode_tokens_bytes(ids[:MAX_CONTEXT_LENGTH]))
    while end < len(whole) and whole[end] & 0xC0 == 0x80:  # a character the cut splits is kept whole
        end += 1
    return whole[:end].decode("utf-8")


def defaults() -> dict:
    """:data:`DEFAULTS` as this server opens: with a module named on its command line, the variant is that module
    (``user_code.opening``), so a URL without ``variant`` means it and the book's MHA is written when picked."""
    module = user_code.opening()
    return DEFAULTS if module is None else {**DEFAULTS, "variant": module}


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("it is not true or false")


class OutOfRangeError(ValueError):
    """A URL parameter's whole number outside the values it may take (its words say which)."""


# a whole number as a box or a link writes one: a sign in front, then digits, or thousands set apart in groups of
# three by one kind of separator — a comma, an underscore or a space (``1,500``; not ``1,5``, a decimal comma)
_WHOLE = re.compile(r"([+-]?)([0-9]+|[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,3}(?:_[0-9]{3})+|[0-9]{1,3}(?: [0-9]{3})+)")


def whole_digits(text: str) -> str | None:
    """The digits (and sign) of the whole number ``text`` writes — digits, a sign in front, thousands set apart in
    groups of three by commas, underscores or spaces (``1,500``), spaces around —, or None (``1,5``, ``1 2``,
    ``1,000_000``): what a number box and a link's number both take."""
    found = _WHOLE.fullmatch(text.strip())
    return None if found is None else found[1] + re.sub(r"[,_ ]", "", found[2])


def _whole_number(raw: str) -> int:
    """``raw`` as an int (:func:`whole_digits`); a ValueError that says so in words (never Python's own text) when it
    is not one, and an :class:`OutOfRangeError` when it has more digits than ``int()`` reads (a whole number far out
    of any range)."""
    digits = whole_digits(raw)
    if digits is None:
        raise ValueError("it is not a whole number")
    try:
        return int(digits)
    except ValueError:  # more digits than int() reads
        raise OutOfRangeError("it is out of range (far too many digits)") from None


def _parse_int(low: int, high: int):
    """A setting's whole number from ``low`` to ``high``: "it is out of range (1 … 4,096)" for a whole number outside
    them, "it is not a whole number (1 … 4,096)" for anything else."""
    def parse(raw: str) -> int:
        return _in_range(raw, low, high, "it is {} ({})".format)
    return parse


def _in_range(raw: str, low: int, high: int, words) -> int:
    """``raw`` as a whole number from ``low`` to ``high``; else a ValueError whose text is ``words(problem, span)``
    — problem "out of range" (an :class:`OutOfRangeError`) or "not a whole number", span "1 … 1,024"."""
    try:
        value = _whole_number(raw)
    except OutOfRangeError:
        value = None
    except ValueError:
        raise ValueError(words("not a whole number", _span(low, high))) from None
    if value is None or not low <= value <= high:
        raise OutOfRangeError(words("out of range", _span(low, high)))
    return value


def _parse_choice(choices):
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"choose one of {', '.join(choices)}")
        return raw
    return parse


def _parse_variant(raw: str) -> str:
    """A variant of the registry or a listed module's label; a module this server does not list is said so in words
    (never where the server keeps its files)."""
    choices = [*variants.VARIANTS, *user_code.listed()]
    if raw not in choices and raw.startswith(user_code.LABEL_PREFIX):
        raise ValueError(f"it is not a module this server offers: pick one under Attention variant "
                         f"({user_code.HOW_LISTED})")
    return _parse_choice(choices)(raw)


def _parse_dropout(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("it is not a number") from None
    if not 0.0 <= value <= 0.9:
        raise ValueError("dropout must be between 0 and 0.9")
    return round(value, 2)


def _parsers() -> dict:
    return {
        "text": str,
        "weights": str,  # checked against the listed names by settings_from_query
        "layer": _whole_number,  # whether the weights have it: below for the book's classes, by the sidebar for a model
        # (which names the model's own layers, not attnviz's bound)
        "attention": _parse_int(1, MAX_ATTENTIONS),  # whether the module has it: by the sidebar, which runs it
        "variant": _parse_variant,  # a module: only a listed label
        "preset": _parse_choice(list(PRESETS)),
        "d_in": _parse_int(1, MAX_DIM),
        "d_out": _parse_int(1, MAX_DIM),
        "num_heads": _parse_int(1, MAX_HEADS),
        "causal": _parse_bool,
        "dropout": _parse_dropout,
        "train": _parse_bool,
        "seed": _parse_int(0, MAX_SEED),
        "device": _parse_choice(available_devices()),
        "num_kv_groups": _parse_int(1, MAX_HEADS),
        "latent_dim": _parse_int(1, MAX_DIM),
        "sliding_window_size": _parse_int(1, MAX_CONTEXT_LENGTH),
        "positions": _parse_choice(configs.POSITIONS),
        "rope_base": _parse_rope_base,
    }


def _parse_rope_base(raw: str) -> int:
    try:
        value = _whole_number(raw)
    except OutOfRangeError:
        value = None
    if value not in ROPE_BASES:
        raise ValueError(f"choose {' or '.join(map(str, ROPE_BASES))}")
    return value


def fit_modern(values: dict) -> tuple[dict, dict[str, str]]:
    """``values`` with K/V groups, latent width and positions that work with its heads and d_out, and a notice
    for each value replaced, keyed by its setting: groups that do not divide the heads, a latent wider than d_out,
    rotary positions with an odd head_dim (each rotation turns a pair of dimensions)."""
    values, notices = dict(values), {}
    num_heads, d_out = int(values["num_heads"]), int(values["d_out"])
    if num_heads % int(values["num_kv_groups"]):
        new = default_kv_heads(num_heads)
        notices["num_kv_groups"] = (f"num_kv_groups={values['num_kv_groups']} does not divide {num_heads} heads; "
                                    f"using {amount(new, 'K/V group')}.")
        values["num_kv_groups"] = new
    if int(values["latent_dim"]) > d_out:
        new = configs.default_latent_dim(d_out)
        notices["latent_dim"] = f"latent_dim={values['latent_dim']} is wider than d_out {d_out}; using {new}."
        values["latent_dim"] = new
    if values["positions"] == "rotary" and d_out % num_heads == 0 and (d_out // num_heads) % 2:
        notices["positions"] = (f"Rotary positions need an even head_dim (it is {d_out // num_heads}); "
                                "using learned positions.")
        values["positions"] = "learned"
    return values, notices


def ignored(params: list[tuple[str, object]], why: str, limit: int = CLIPPED_LENGTH) -> str:
    """The one wording of a notice about URL parameters the app does not use: ``Ignored URL parameter
    head='9': it is out of range (this layer's 4 heads: 0 … 3); showing head 0.`` — "parameters" for several, each
    as ``name='value'`` (a parameter named without a value — ``None`` — by its name alone), then a colon and ``why``:
    what is wrong with it and what the app does instead, as whole sentences.  A value is quoted (``repr`` of its first
    ``limit`` characters, :func:`clipped`) as most of these notices quoted it before this one wording: the quotes show
    where a value ends when it holds spaces, commas or nothing, and a number the link gave reads as the text it was."""
    named = ", ".join(key if value is None else f"{key}={clipped(value, limit)!r}" for key, value in params)
    return f"Ignored URL parameter{'s' if len(params) > 1 else ''} {named}: {why}"


def last_of(key: str, raw: str | list[str]) -> tuple[str, str | None]:
    """A URL parameter's value — the last, where the link gives it several times (``?text=a&text=b``: a parameter
    appended to a link overrides it) — and a notice naming the values set aside (None when they all agree)."""
    if isinstance(raw, str):
        return raw, None
    if not raw:
        return "", None
    last, others = raw[-1], [value for value in raw[:-1] if value != raw[-1]]
    if not others:
        return last, None
    return last, (f"URL parameter {clipped(key)} is given {len(raw)} times: using the last, {clipped(last)!r}; "
                  f"ignored {', '.join(repr(clipped(value)) for value in others[:3])}"
                  + (f" and {len(others) - 3} more" if len(others) > 3 else "") + ".")


def settings_from_query(params: dict[str, str | list[str]], weights_names=None) -> tuple[dict, list[str]]:
    """Settings from URL parameters (same names as the widget keys): (valid values, notices).

    A parameter's value is a string, or the list of its values where the link repeats it (:func:`last_of`).
    ``weights_names``: the weights options listed for this session; a ``weights`` value not among them is
    ignored with a notice (it is compared with the names, never used as a path)."""
    values, notices = dict(defaults()), []
    listed = set(weights_names) if weights_names is not None else {weights.BOOK}
    parsers = _parsers()
    used, unknown = set(), []  # the settings that took the URL's value; the names that are no setting
    unlisted = False  # the link names weights not listed here: its notice says the book's classes open instead
    for key, raw in params.items():
        if key == TEXT_LEFT_OUT:  # the sidebar reads it (a text left out of the URL); it sets nothing
            continue
        if key in NOT_SETTINGS:
            notices.append(ignored([(key, None)], NOT_SETTINGS[key]))
            continue
        if key not in parsers and key not in PAGE_PARAMS:
            unknown.append(key)
            continue
        raw, repeated = last_of(key, raw)
        if repeated:  # a page's own parameter too: its page reads the last
            notices.append(repeated)
        if key in PAGE_PARAMS:
            continue
        if key == "weights" and raw not in listed:
            notices.append(_weights_not_listed(raw))
            unlisted = True
            continue
        try:
            values[key] = parsers[key](raw)
        except ValueError as exc:  # the parsers' own words, never Python's
            notices.append(ignored([(key, raw)], f"{exc}."))
        else:
            used.add(key)
    if unknown:
        notices.insert(0, _unknown_notice(unknown))
    if "layer" in used and values["layer"] and values["weights"] == weights.BOOK:
        if not unlisted:  # the link's model's layer: the weights' notice says why the book's classes open
            notices.append(ignored([("layer", values["layer"])], "the book's classes are one attention layer; pick "
                                   "a checkpoint under Weights for its layers."))
        values["layer"] = 0
    if "attention" in used and values["attention"] != 1 and (
            values["weights"] != weights.BOOK or values["variant"] not in user_code.listed()):
        if not unlisted:
            notices.append(ignored([("attention", values["attention"])], ONE_ATTENTION))
        values["attention"] = 1
    if "preset" in used and values["preset"] in PRESET_DIMS:  # the sizes the link does not give are the preset's
        for key, value in zip(("d_in", "d_out", "num_heads"), preset_dims(values["preset"], values["variant"])):
            if key not in used:  # a size it gives is its own: the preset becomes custom below where they differ
                values[key] = value
    if is_book(values["preset"]) and values["variant"] in variants.VARIANTS:  # the book's listing, as printed
        spec = variants.get(values["variant"])
        if "causal" not in used:
            values["causal"] = spec.book_causal
        if "seed" not in used:
            values["seed"] = spec.book_seed
    if values["weights"] != weights.BOOK:
        # the weights decide their own sizes (the sidebar shows them and says which of the link's it set aside):
        # fitting the link's sizes to each other here would announce sizes no page draws
        return values, notices
    new = fitted_heads(values["d_out"], values["num_heads"], near=DEFAULTS["num_heads"])
    if new != values["num_heads"]:
        # d_out wins: a head count must divide it (the sidebar's rule); the heads fall back to the divisor nearest
        # the default's, and the notice names the URL's value that caused it
        spec = variants.VARIANTS.get(values["variant"])  # None: a user's module, which has heads
        if "num_heads" in used:
            notices.append(ignored([("num_heads", values["num_heads"])], f"it does not divide d_out "
                                   f"{values['d_out']}; using {new} heads."))
        elif spec is None or spec.not_applicable("num_heads") is None:  # a single-head class runs none of them
            notices.append(f"URL parameter d_out={values['d_out']}: the default {values['num_heads']} heads do not "
                           f"divide it; using {new} heads.")
        values["num_heads"] = new
    if not preset_holds(values["preset"], values["variant"], (values["d_in"], values["d_out"], values["num_heads"])):
        values["preset"] = "custom"  # as the sidebar does when a size is edited: the size box names no other sizes
    values, fitted = fit_modern(values)
    # a default that does not fit (4 groups for 2 heads) is replaced silently; a URL's value with a notice
    notices += [note for key, note in fitted.items() if key in used]
    return values, notices


# a trained model's listed name (live_train.run_name after weights.TRAINED), with the " (2)" a second one gets
_TRAINED_RUN = re.compile(r"(?:(?P<steps>\d+) steps|stopped at step (?P<done>\d+) of (?P<planned>\d+)), "
                          r"seed (?P<seed>\d+)(?: \(\d+\))?")


def _weights_not_listed(raw: str) -> str:
    """The notice for a link's ``weights`` that names no option listed here; for a model trained on the Train page
    (a session's own, which a link made elsewhere can name), what happened and how to see it here."""
    if not raw.startswith(weights.TRAINED):
        return ignored([("weights", raw)], "no weights of that name are listed here (this server lists the book's "
                       "classes and the checkpoints it found).")
    run = _TRAINED_RUN.fullmatch(raw[len(weights.TRAINED):])
    again = "train one on the Train page"
    if run is not None:
        stopped = f"; it was stopped at step {int(run['done']):,}" if run["done"] else ""
        again = (f"train it on the Train page ({int(run['steps'] or run['planned']):,} steps, seed {int(run['seed'])}: "
                 f"the same seed gives the same run{stopped})")
    return ignored([("weights", raw)], "a model trained on the Train page stays in the browser session, on the "
                   "server, that trained it, so the book's classes open instead. To see it here, "
                   f"{again}, or ask for its zip (Download the trained model (zip)) and start the app with "
                   "--checkpoint on its folder.", limit=60)


def book_sizes_of_link(params: dict[str, str | list[str]]) -> dict:
    """The book's classes' :data:`BOOK_SIZES` that a link naming a checkpoint gives them: its sizes are the
    checkpoint's (the sidebar sets them aside), so the defaults' — and K/V groups, latent width and positions as the
    link gives them, fitted to those sizes."""
    book_params = {key: value for key, value in params.items() if key not in (*WEIGHTS_SIZES, "weights", "layer")}
    values = settings_from_query(book_params)[0]
    return {key: values[key] for key in BOOK_SIZES}


def _unknown_notice(names: list[str], shown: int = 5) -> str:
    """One notice for every URL parameter that is no setting: the first ``shown`` names and how many more."""
    quoted = [repr(clipped(name)) for name in names[:shown]]
    if len(names) == 1:
        return f"Ignored unknown URL parameter {quoted[0]}."
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"Ignored {len(names)} unknown URL parameters: {', '.join(quoted)}{more}."


def parse_head(raw: str, num_heads: int) -> int:
    """A page's ``head`` parameter: one of ``num_heads`` heads; a ValueError that says why in words when it is not."""
    return parse_number(raw, 0, num_heads - 1, what=f"this layer's {amount(num_heads, 'head')}")


def parse_stage(raw: str, stages) -> str:
    """A page's ``stage`` parameter: one of ``stages`` (the page's, for this run)."""
    return parse_option(raw, stages, what="a stage this page shows")


def parse_pair(raw: str, pairs: int) -> int:
    """The Steps page's ``pair`` parameter: one of the ``pairs`` (head_dim/2) pairs of dimensions a run with rotary
    positions turns, 0 … pairs − 1; a run without them (``pairs`` 0) turns none, so none is taken."""
    if not pairs:
        raise OutOfRangeError("picks nothing here: this run does not rotate q and k (with Positions: rotary it does)")
    return parse_number(raw, 0, pairs - 1, what=f"this run's {amount(pairs, 'pair')} of dimensions")


def parse_option(raw: str, options, what: str) -> str:
    """A page's parameter that names one of ``options`` (compared with them, never used as a name in code): the
    option; a ValueError that says it is not ``what`` and lists them, when it is none of them."""
    for option in options:
        if raw == option:
            return option
    raise ValueError(f"is not {what} ({', '.join(options)})")


def parse_cell(raw: str, n: int) -> tuple[int, int]:
    """A page's ``cell`` parameter, ``query,key`` (``5,2``: row 5, column 2 of an ``n``-token map, counted from 0): the
    (query, key) pair; a ValueError that says why in words when it is not a cell of that map — "is out of range" when
    it is two whole numbers, one of them past the map."""
    problem = ValueError(f"is not a cell of this {n:,}-token map, written query,key ({_span(0, n - 1)} each)")
    parts = raw.split(",")
    if len(parts) != 2:
        raise problem
    try:
        query, key = (parse_number(part.strip(), 0, n - 1, what="") for part in parts)
    except OutOfRangeError:
        raise OutOfRangeError(f"is out of range (this {n:,}-token map's cells, query,key: {_span(0, n - 1)} "
                              "each)") from None
    except ValueError:
        raise problem from None
    return query, key


def cell_text(query: int, key: int) -> str:
    """The ``cell`` parameter of the cell (``query``, ``key``): what :func:`parse_cell` reads."""
    return f"{query},{key}"


class PartlyUsedError(ValueError):
    """A page parameter naming several values of which only some can be used: its text says which cannot and why
    (as a ValueError's does), ``kept`` holds the ones that can, ``instead`` what the page shows with them."""

    def __init__(self, message: str, kept: list, instead: str):
        super().__init__(message)
        self.kept, self.instead = kept, instead


def parse_options(raw: str, options, what: str, using: str = "using") -> list[str]:
    """A page's parameter that names several of ``options``, comma-separated (``L0H1,L1H0``; empty: none): the
    options in the link's order, each once (an empty part is skipped).  Names that are none of them are dropped: a
    :class:`PartlyUsedError` that names them and keeps the others ("``using`` L0H1 only"), or, when none is left, a
    ValueError that names them."""
    options = list(options)
    chosen, unknown = [], []
    for name in (part.strip() for part in raw.split(",")):
        if not name:
            continue
        if name not in options:
            if clipped(name) not in unknown:
                unknown.append(clipped(name))
        elif name not in chosen:
            chosen.append(name)
    if not unknown:
        return chosen
    listed = ", ".join(options) if len(options) <= 12 else f"{options[0]} … {options[-1]}"
    shown = [repr(name) for name in unknown[:3]] + ([f"{len(unknown) - 3} more"] if len(unknown) > 3 else [])
    names = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
    message = f"names {names}, {'which is not' if len(unknown) == 1 else 'none of which is'} {what} ({listed})"
    if not chosen:
        raise ValueError(message)
    raise PartlyUsedError(message, chosen, f"{using} {', '.join(chosen)} only")


def parse_number(raw: str, low: int, high: int, what: str) -> int:
    """A page's whole-number parameter from ``low`` to ``high``, ``what`` naming the values it may take ("new tokens",
    "this layer's 4 heads"); else a ValueError in words: "is out of range (new tokens: 1 … 1,024)" for a whole number
    outside them (an :class:`OutOfRangeError`), "is not a whole number (new tokens: 1 … 1,024)" for anything else."""
    return _in_range(raw, low, high, lambda problem, span: f"is {problem} ({what}: {span})")


def parse_window_start(raw: str, n: int, window: int) -> int:
    """A page's ``row`` or ``col`` parameter: the first row or column of a ``window``-wide window on an ``n``-token
    map, 0 … n − window; a map of at most ``window`` tokens is drawn whole, so only 0 (nothing to move) is taken."""
    last = max(0, n - window)
    try:
        return parse_number(raw, 0, last, what=f"window positions for {n:,} tokens")
    except OutOfRangeError:
        if last:
            raise
        raise OutOfRangeError(f"moves no window: {n:,} tokens are drawn whole (up to {window} are)") from None


def _span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low} … {high:,}"


def config_from_settings(values: dict, checkpoint: str | None = None) -> AttentionConfig:
    """The run's config; settings that don't apply to the variant are normalised (one cache entry).

    ``checkpoint`` = a weights ref: layer ``values["layer"]`` of that model, with the sizes the model decides
    (:func:`attnviz.pipeline.settle`), so a run has one cache key whatever the other settings say."""
    if checkpoint is not None:
        asked = AttentionConfig(checkpoint=checkpoint, layer=int(values["layer"]), causal=bool(values["causal"]))
        return pipeline.settle(asked)[0]
    if values["variant"] in user_code.listed():  # a user's module, by its listed label; it is built with these sizes
        return pipeline.settle(_module_asked(values))[0]
    spec = variants.get(values["variant"])
    values = fit_modern(values)[0]
    applies = spec.settings
    rotary = "positions" in applies and values["positions"] == "rotary"
    return AttentionConfig(
        variant=spec.name,
        d_in=int(values["d_in"]),
        d_out=spec.out_width(values["d_in"], values["d_out"]),
        num_heads=spec.head_count(values["num_heads"]),
        dropout=float(values["dropout"]) if spec.dropout else 0.0,
        train=bool(values["train"]) and spec.dropout,
        causal=bool(values["causal"]) if spec.not_applicable("causal") is None else spec.book_causal,
        qkv_bias=False,  # the book's classes as the book builds them (the app has no bias setting: NOT_SETTINGS)
        seed=int(values["seed"]),
        device=resolve_device(values["device"])[0],  # the device that runs (settled: "auto" picks one)
        embedding="book" if is_book(values["preset"]) and int(values["d_in"]) == 3 else "seeded",
        num_kv_groups=int(values["num_kv_groups"]) if "num_kv_groups" in applies else spec.kv_groups,  # MQA: 1
        latent_dim=int(values["latent_dim"]) if "latent_dim" in applies else None,
        sliding_window_size=int(values["sliding_window_size"]) if "sliding_window_size" in applies else None,
        positions="rotary" if rotary else "learned",
        rope_base=int(values["rope_base"]) if rotary else DEFAULTS["rope_base"],
    )


def _module_asked(values: dict) -> AttentionConfig:
    """The config asked of the user's module ``values["variant"]`` names: the module decides its sizes when settled."""
    return AttentionConfig(module=values["variant"], d_in=int(values["d_in"]), d_out=int(values["d_out"]),
                           num_heads=int(values["num_heads"]), dropout=float(values["dropout"]),
                           train=bool(values["train"]), causal=bool(values["causal"]), seed=int(values["seed"]),
                           attention=int(values["attention"]))


def module_attentions(values: dict) -> tuple[str, ...]:
    """Where each attention of the user's module ``values`` picks is, in the order its forward computes them ("line
    35": ``producers.user_module.attention_places``; one for a module whose attentions are one layer's heads), read
    off the run that learns its sizes; () for the book's classes, a checkpoint, or a module that cannot run (its
    page's run says why)."""
    if values["weights"] != weights.BOOK or values["variant"] not in user_code.listed():
        return ()
    from attnviz.producers import user_module  # builds and runs the user's code: only for a listed module

    try:
        return user_module.attention_places(_module_asked(values))
    except configs.InputError:
        return ()


def opening_config() -> AttentionConfig:
    """The config of the run a fresh server's first page shows (a URL without settings: :func:`defaults`), for its
    warm-up: the book's MHA's, or the one asked of the module the command line names, not settled — settling builds
    and runs the user's module, which :func:`attnviz.pipeline.prepare` does in the warm-up's thread.  Lists the
    modules the command line names (loading their files) in the calling thread."""
    values = settings_from_query({})[0]
    if values["variant"] in user_code.listed():
        return _module_asked(values)
    return config_from_settings(values)


def url_value(key: str, value) -> str | None:
    """The URL parameter of the setting ``key``: a long text's part shown (:func:`url_text`; None: a text whose part
    shown is too long for a URL)."""
    if key == "text":
        return url_text(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def text_left_out_query(values: dict) -> dict[str, str]:
    """The mark :data:`TEXT_LEFT_OUT` where ``values``' text is left out of a URL (:func:`url_value` None), for a
    link and a URL to end with; else nothing."""
    return {TEXT_LEFT_OUT: "1"} if url_value("text", values["text"]) is None else {}


def every_setting_query(values: dict) -> dict[str, str]:
    """URL parameters for every setting (text left out when very long), in :data:`SETTING_KEYS`' order."""
    params = {key: url_value(key, values[key]) for key in SETTING_KEYS}
    return {key: value for key, value in params.items() if value is not None}


def applying_settings(values: dict, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The settings that make the view of ``values``: those the variant's record (a checkpoint's, a user module's,
    the book's classes' variant: ``attnviz.variants``) does not set aside, the layer only for a checkpoint (the book's
    classes are one layer), and the RoPE base only with rotary positions.  ``also``: the settings the page's work runs
    whatever the book's class (Compare runs the multi-head variants with the sidebar's d_out and Heads, a single-head
    class picked: ``ui.navigation.PageEntry.also_runs``); a checkpoint's sizes stay its own."""
    if values["weights"] != weights.BOOK:
        spec = variants.CHECKPOINT
    elif values["variant"] in variants.VARIANTS:
        spec = variants.get(values["variant"])
    else:
        spec = variants.USER_MODULE  # a module listed on the command line, by its label
    return tuple(key for key in SETTING_KEYS
                 if (spec.not_applicable(key) is None or key in also and spec is not variants.CHECKPOINT)
                 and (key != "layer" or spec is variants.CHECKPOINT)
                 and (key != "rope_base" or values["positions"] == "rotary"))


def share_query(values: dict, also: tuple[str, ...] = ()) -> dict[str, str]:
    """URL parameters of the Share link: every setting that makes the view (:func:`applying_settings`, with the
    settings the page ``also`` runs; the text left out when very long, and :data:`TEXT_LEFT_OUT` in its place), also
    at its default, so that the link means the same view whatever a later release's defaults are, and none that does
    not (K/V groups for multi-head attention, a window where there is none): the link says what the view is.  A
    setting that does not apply goes in only where the others need it to be given as they are."""
    return {**_share_settings(values, also), **text_left_out_query(values)}


def _share_settings(values: dict, also: tuple[str, ...]) -> dict[str, str]:
    """:func:`share_query`'s settings."""
    named, applying = every_setting_query(values), applying_settings(values, also)
    query = {key: value for key, value in named.items() if key in applying}
    while True:  # each pass adds one setting the link needs, or ends
        given = _link_gives_with(query, values)
        if all(url_value(key, given[key]) == named[key] for key in query):
            return {key: value for key, value in named.items() if key in query}
        needed = [key for key in named if key not in query and url_value(key, given[key]) != named[key]]
        if not needed:
            return {key: value for key, value in named.items() if key in query}
        query[needed[0]] = named[needed[0]]


def view_settings(values: dict, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The settings whose values make the view of ``values`` on a page whose work also runs ``also``
    (:func:`applying_settings`): for the book's classes, those that apply and those the Share link names for them to
    be given as they are (:func:`share_query`), not what the class sets aside (a single-head class's heads, dropout
    where there is none, the K/V groups of a class without them); for a checkpoint, those its run takes (the text,
    the weights, the layer, the mask), not the book's settings the session holds beside it (K/V groups fitted to
    another model's heads, a seed) — but on a page that runs the book's classes at its sizes (:data:`BOOK_CLASSES` in
    ``also``: Compare), where every setting does; for a user's module, every setting.  The URL names no other
    (:func:`url_query`), and a URL that gives these gives the view (:func:`settings_given`)."""
    if values["weights"] != weights.BOOK:
        return SETTING_KEYS if BOOK_CLASSES in also else applying_settings(values)
    if values["variant"] not in variants.VARIANTS:
        return SETTING_KEYS
    applying, shared = applying_settings(values, also), share_query(values, also)
    return tuple(key for key in SETTING_KEYS if key in applying or key in shared)


def url_query(values: dict, also: tuple[str, ...] = ()) -> dict[str, str]:
    """URL parameters for the settings ``values``, in :data:`SETTING_KEYS`' order, on a page whose work also runs
    ``also``: the settings that make the view (:func:`view_settings`: none the book's class sets aside, as the Share
    link names none), but a setting a link without it gives is left out — its default, as a page leaves out its own
    defaults, or with a checkpoint its sizes (:data:`WEIGHTS_SIZES`) and what they fit (:func:`_link_gives_with`) —
    so that a link without settings is one the app need not rewrite; a setting the others imply otherwise goes in (a
    book preset implies its variant's mask and seed: :func:`settings_from_query`).  The text is left out when very
    long, too, and :data:`TEXT_LEFT_OUT` ends the URL in its place."""
    return {**_url_settings(values, also), **text_left_out_query(values)}


def _url_settings(values: dict, also: tuple[str, ...]) -> dict[str, str]:
    """:func:`url_query`'s settings."""
    named, view = every_setting_query(values), view_settings(values, also)
    own, base = _weights_own(values), _link_gives_with({}, values)
    query = {key: value for key, value in named.items()
             if key in view and value != url_value(key, base[key]) and key not in own}
    while True:  # a setting the others imply differently goes back in; each pass adds at least one, or ends
        given = _link_gives_with(query, values)
        implied = [key for key in named
                   if key in view and key not in query and url_value(key, given[key]) != named[key]]
        if not implied:
            return {key: value for key, value in named.items() if key in query}
        query.update((key, named[key]) for key in implied)


def _weights_own(values: dict) -> tuple[str, ...]:
    """The settings ``values``' weights decide themselves: a checkpoint's sizes and the attention its blocks hold (the
    sidebar's disabled variant), none for the book's classes."""
    return (*WEIGHTS_SIZES, "variant") if values["weights"] != weights.BOOK else ()


def _link_gives_with(params: dict[str, str], values: dict) -> dict:
    """The settings a link with these settings parameters gives (:func:`link_settings`) where ``values``' weights
    are a checkpoint: the sidebar sets the checkpoint's sizes (``values``' own) and fits K/V groups, latent width and
    positions to them (:func:`fit_modern`)."""
    given = link_settings(params)
    if own := _weights_own(values):
        given = fit_modern({**given, **{key: values[key] for key in own}})[0]
    return given


def link_settings(params: dict[str, str]) -> dict:
    """The settings a link with these settings parameters (each given once) gives: each parameter's value, and where
    it has none, the default or what the others imply.  Its weights are taken as named (whether they are listed is
    for :func:`settings_from_query`'s caller)."""
    return settings_from_query(params, weights_names=[params.get("weights", weights.BOOK)])[0]


def settings_given(params: dict[str, str], values: dict, *, without: tuple[str, ...] = (),
                   also: tuple[str, ...] = ()) -> bool:
    """Whether a link whose settings parameters are ``params`` (each given once) gives the settings ``values`` that
    make the view on a page whose work also runs ``also`` (:func:`view_settings`), however it writes them (a text too
    long for a URL: never): the view it opens is ``values``' view.  The settings named in ``without`` are left out of
    the comparison (a text too long for a URL, which the session holds instead)."""
    given = _link_gives_with(params, values)
    return all(url_value(key, given[key]) == url_value(key, values[key])
               for key in view_settings(values, also) if key not in without)


def link_gives(params: dict[str, str], values: dict, also: tuple[str, ...] = ()) -> bool:
    """Whether a link whose settings parameters are ``params`` (each given once) gives exactly the settings
    ``values`` that make the view on a page whose work also runs ``also`` (:func:`settings_given`), and names each of
    the others as ``values`` has it, each parameter written as :func:`url_value` writes it: :func:`url_query`'s, every
    setting's (:func:`every_setting_query`) or any between (a text too long for a URL: never).  With a checkpoint,
    sizes a link leaves out are its own."""
    return (all(params[key] == url_value(key, values[key]) for key in params)
            and settings_given(params, values, also=also))


def is_book(preset: str) -> bool:
    return preset in variants.PRESETS and variants.PRESETS[preset].book


def preset_dims(preset: str, variant: str) -> tuple[int, int, int] | None:
    """The sizes (d_in, d_out, num_heads) the size ``preset`` gives the sidebar's ``variant`` (``Preset.sizes``: the
    wrapper at the book size has its listing's 2 heads × 2); None for "custom"."""
    if preset not in variants.PRESETS:
        return None
    return variants.PRESETS[preset].sizes(variants.VARIANTS.get(variant))


def preset_holds(preset: str, variant: str, sizes: tuple[int, int, int]) -> bool:
    """Whether the sidebar's ``sizes`` (d_in, d_out, num_heads) keep the size ``preset`` for ``variant``
    (``Preset.holds``: its sizes, and at the book size the wrapper's exercise 3.2 too); True for "custom"."""
    if preset not in variants.PRESETS:
        return True
    return variants.PRESETS[preset].holds(variants.VARIANTS.get(variant), sizes)

