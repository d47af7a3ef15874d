"""Streamlit glue — the only attnviz module that imports Streamlit.

Every page calls :func:`setup` first.  It draws the shared sidebar (the same on every page), keeps
the settings across page switches and in the URL, and returns the cached Trace of this run.

Routing: attnviz uses the ``pages/`` folder's own routing (``app.py`` is the Heads view at ``/``),
so a shared link to any page works as the very first request to a fresh server: each page runs
``setup()`` itself.  Widget values are copied to non-widget ``_keep_*`` keys after every run and
written back before the widgets are drawn, so they survive page switches.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import re
import urllib.parse
from dataclasses import dataclass

import streamlit as st
from streamlit.errors import StreamlitAPIException

from attnviz import pipeline, variants
from attnviz.pipeline import VARIANTS, AttentionConfig, InputError, Trace

DEFAULT_TEXT = "Your journey starts with one step"
PRESETS = variants.PRESET_LABELS  # name -> label, "custom" last
PRESET_DIMS = {name: preset.dims for name, preset in variants.PRESETS.items()}
DEFAULTS = {
    "text": DEFAULT_TEXT,
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
}
SETTING_KEYS = tuple(DEFAULTS)
MAX_URL_TEXT = 2000  # longer texts are not put in the URL
PAGES = (
    ("app.py", "Heads", ":material/grid_view:"),
    ("pages/steps.py", "Steps", ":material/footprint:"),
    ("pages/shapes.py", "Shapes", ":material/account_tree:"),
    ("pages/tokens.py", "Tokens", ":material/text_fields:"),
    ("pages/compare.py", "Compare variants", ":material/compare:"),
    ("pages/pitfalls.py", "Pitfall lab", ":material/bug_report:"),
    ("pages/benchmark.py", "Benchmark", ":material/speed:"),
)
ss = st.session_state


MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")


def markdown_escape(text: str) -> str:
    """Backslash-escape Markdown so user-derived text (URL values, messages) shows literally."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", text)


# --------------------------------------------------------------------------- settings state

def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("use true or false")


def _parse_int(low: int, high: int):
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value
    return parse


def _parse_choice(choices):
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"choose one of {', '.join(choices)}")
        return raw
    return parse


def _parse_dropout(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 0.9:
        raise ValueError("dropout must be between 0 and 0.9")
    return round(value, 2)


def _parsers() -> dict:
    return {
        "text": str,
        "variant": _parse_choice(list(VARIANTS)),
        "preset": _parse_choice(list(PRESETS)),
        "d_in": _parse_int(1, pipeline.MAX_DIM),
        "d_out": _parse_int(1, pipeline.MAX_DIM),
        "num_heads": _parse_int(1, pipeline.MAX_HEADS),
        "causal": _parse_bool,
        "dropout": _parse_dropout,
        "train": _parse_bool,
        "seed": _parse_int(0, pipeline.MAX_SEED),
        "device": _parse_choice(pipeline.available_devices()),
    }


def settings_from_query(params: dict[str, str]) -> tuple[dict, list[str]]:
    """Settings from URL parameters (same names as the widget keys): (valid values, notices)."""
    values, notices = dict(DEFAULTS), []
    parsers = _parsers()
    for key, raw in params.items():
        if key not in parsers:
            notices.append(f"Ignored unknown URL parameter {key!r}.")
            continue
        try:
            values[key] = parsers[key](raw)
        except (ValueError, TypeError) as exc:
            notices.append(f"Ignored URL parameter {key}={raw[:40]!r}: {exc}.")
    if "preset" in params and values["preset"] in PRESET_DIMS and not {"d_in", "d_out", "num_heads"} & set(params):
        values["d_in"], values["d_out"], values["num_heads"] = PRESET_DIMS[values["preset"]]
    if _is_book(values["preset"]) and "causal" not in params:
        values["causal"] = variants.get(values["variant"]).book_causal
    if values["d_out"] % values["num_heads"]:
        notices.append(
            f"Ignored URL parameter num_heads={values['num_heads']}: it does not divide d_out {values['d_out']}."
        )
        values["num_heads"] = pipeline.nearest_divisors(values["d_out"], DEFAULTS["num_heads"], 1)[0]
    return values, notices


def _is_book(preset: str) -> bool:
    return preset in variants.PRESETS and variants.PRESETS[preset].book


def _init_session() -> None:
    """First run of a session: defaults, overlaid with valid URL parameters."""
    if "_keep_text" in ss:
        return
    values, notices = settings_from_query(dict(st.query_params))
    for key, value in values.items():
        ss[f"_keep_{key}"] = value
    ss["_url_notices"] = notices


def _restore() -> None:
    """Give every widget its kept value before it is drawn (Streamlit drops widget state on page
    switches; the ``_keep_*`` copies are updated by the widgets' on_change callbacks)."""
    for key in SETTING_KEYS:
        ss[key] = ss[f"_keep_{key}"]


def _set(key: str, value) -> None:
    ss[key] = ss[f"_keep_{key}"] = value


def _changed(key: str) -> None:
    """on_change of every sidebar widget: keep its value, and keep the sizes consistent."""
    _set(key, ss[key])
    if key == "preset" and ss["preset"] in PRESET_DIMS:
        for name, value in zip(("d_in", "d_out", "num_heads"), PRESET_DIMS[ss["preset"]]):
            _set(name, value)
    elif key in ("d_in", "d_out", "num_heads") and PRESET_DIMS.get(ss["preset"]) != (
            ss["d_in"], ss["d_out"], ss["num_heads"]):
        _set("preset", "custom")
    if key in ("preset", "variant") and _is_book(ss["preset"]):
        # the book masks only causal attention, the wrapper and MHA (sections 3.5-3.6)
        _set("causal", variants.get(ss["variant"]).book_causal)
    if key == "d_out" and ss["d_out"] % ss["num_heads"]:
        new = pipeline.nearest_divisors(ss["d_out"], ss["num_heads"], 1)[0]
        ss["_dims_notice"] = f"{ss['num_heads']} heads do not divide d_out {ss['d_out']}; using {new} heads."
        _set("num_heads", new)


def _bind(key: str) -> dict:
    """Widget keyword arguments: its key, and the callback that keeps its value."""
    return {"key": key, "on_change": _changed, "args": (key,)}


def _keep_page_value(key: str) -> None:
    ss[f"_keep_{key}"] = ss[key]


def page_bind(key: str, default, valid=lambda value: True) -> dict:
    """Widget keyword arguments for a page-only widget whose value survives page switches."""
    kept = ss.get(f"_keep_{key}", default)
    ss[key] = kept if valid(kept) else default
    return {"key": key, "on_change": _keep_page_value, "args": (key,)}


def config_from_settings(values: dict) -> AttentionConfig:
    """The run's config; settings that don't apply to the variant are normalised (one cache entry)."""
    spec = variants.get(values["variant"])
    return AttentionConfig(
        variant=spec.name,
        d_in=int(values["d_in"]),
        d_out=spec.out_width(values["d_in"], values["d_out"]),
        num_heads=spec.head_count(values["num_heads"]),
        dropout=float(values["dropout"]) if spec.dropout else 0.0,
        train=bool(values["train"]) and spec.dropout,
        causal=bool(values["causal"]),
        seed=int(values["seed"]),
        device=values["device"],
        embedding="book" if _is_book(values["preset"]) and int(values["d_in"]) == 3 else "seeded",
    )


def share_query(values: dict) -> dict[str, str]:
    """URL parameters for the current settings (text left out when very long)."""
    params = {}
    for key in SETTING_KEYS:
        value = values[key]
        if key == "text" and len(value) > MAX_URL_TEXT:
            continue
        params[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return params


# --------------------------------------------------------------------------- sidebar

def sidebar() -> dict:
    """Draw the shared sidebar; returns the current settings."""
    _init_session()
    _restore()
    spec = variants.get(ss["variant"])
    with st.sidebar:
        st.markdown("### attnviz")
        for path, label, icon in PAGES:
            try:
                st.page_link(path, label=label, icon=icon)
            except StreamlitAPIException:  # a page script run on its own (no app.py): no links
                break
        st.text_area("Text", help="Any text; GPT-2 tokens beyond 1024 are truncated.", height=110, **_bind("text"))
        st.selectbox("Attention variant", list(VARIANTS), format_func=VARIANTS.get, **_bind("variant"))
        st.selectbox("Model size", list(PRESETS), format_func=PRESETS.get, **_bind("preset"))
        col_in, col_out = st.columns(2)
        col_in.number_input("d_in", min_value=1, max_value=pipeline.MAX_DIM, step=1, **_bind("d_in"))
        col_out.number_input(
            "d_out", min_value=1, max_value=pipeline.MAX_DIM, step=1, disabled=spec.not_applicable("d_out") is not None,
            help=spec.not_applicable("d_out"), **_bind("d_out"),
        )
        head_options = [h for h in pipeline.divisors(int(ss["d_out"])) if h <= pipeline.MAX_HEADS]
        if ss["num_heads"] not in head_options:
            _set("num_heads", pipeline.nearest_divisors(int(ss["d_out"]), int(ss["num_heads"]), 1)[0])
        st.selectbox(
            "Heads", head_options, disabled=spec.not_applicable("num_heads") is not None,
            help=spec.not_applicable("num_heads") or "Only divisors of d_out are offered (head_dim = d_out / heads).",
            **_bind("num_heads"),
        )
        dims_notice = ss.pop("_dims_notice", None)
        if dims_notice:
            st.caption(f"ℹ️ {dims_notice}")
        st.toggle("Causal mask", help="Hide future tokens (−∞ above the diagonal before softmax).", **_bind("causal"))
        reason = spec.not_applicable("dropout")
        st.slider("Dropout p", 0.0, 0.9, step=0.05, disabled=reason is not None, help=reason, **_bind("dropout"))
        reason = spec.not_applicable("train")
        st.toggle("Dropout active (training mode)", disabled=reason is not None, help=reason, **_bind("train"))
        st.number_input("Seed", min_value=0, max_value=pipeline.MAX_SEED, step=1, **_bind("seed"))
        devices = pipeline.available_devices()
        if ss["device"] not in devices:
            _set("device", "auto")
        st.selectbox("Device", devices, help="auto = CUDA, then MPS, then CPU.", **_bind("device"))
        for notice in ss.get("_url_notices", []):
            st.warning(markdown_escape(notice), icon="🔗")
    values = {key: ss[key] for key in SETTING_KEYS}
    st.query_params.from_dict(share_query(values))
    return values


def _share_and_export(trace: Trace | None) -> None:
    with st.sidebar, st.expander("Share & export", icon=":material/share:"):
        values = {key: ss[key] for key in SETTING_KEYS}
        base = (st.context.url or "").split("?", 1)[0]
        link = base + "?" + urllib.parse.urlencode(share_query(values))
        st.caption("Link to this view (copy with the icon on the right):")
        st.code(link, language=None, wrap_lines=True)
        if len(values["text"]) > MAX_URL_TEXT:
            st.caption(f"The text is longer than {MAX_URL_TEXT:,} characters and is not in the link.")
        st.radio("Figure download format (camera icon on each chart)", ["png", "svg"], horizontal=True,
                 **page_bind("image_format", "png"))
        if trace is not None:
            from attnviz import export

            st.download_button(
                "Download this trace (NPZ + JSON manifest)",
                functools.partial(_export, export.trace_npz, trace_key(trace)),
                file_name="attnviz-trace.npz", mime="application/octet-stream", on_click="ignore",
                icon=":material/download:", help="Every recorded step, the embeddings and output, "
                "with manifest.json (config, tokens, shapes). Large at 1024 tokens.",
            )


# --------------------------------------------------------------------------- computing

@st.cache_resource(show_spinner=False)
def _encoding():
    from attnviz import tokens
    return tokens.get_encoding()


TRACE_CACHE_MB = int(os.environ.get("ATTNVIZ_TRACE_CACHE_MB", "512"))


def _tune_glibc_malloc():
    """Return freed tensor memory to the OS (glibc only; elsewhere a no-op).

    glibc raises its mmap threshold after each freed mmap'd block, so after a few runs the 3-4 MB
    per-head arrays come from per-thread heaps that Streamlit's many script threads fragment and never
    shrink.  A fixed threshold keeps every block ≥ 1 MB in mmap (unmapped when freed), and
    ``malloc_trim`` after each new run hands back what the heaps freed.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD = 1 MiB (also turns off the dynamic threshold)
        return libc.malloc_trim
    except (OSError, AttributeError):
        return lambda pad: 0


_MALLOC_TRIM = _tune_glibc_malloc()


@st.cache_resource(show_spinner=False)
def _trace_cache() -> pipeline.TraceCache:
    """One byte-bounded cache of Traces per server, shared (read-only) by every session."""
    return pipeline.TraceCache(TRACE_CACHE_MB * 2**20)


def cached_trace(text: str, config_values: tuple) -> Trace:
    """Traces are shared, not copied: at n = 1024 a GPT-2-small Trace holds ~210 MB of maps, and
    ``st.cache_data`` would unpickle a copy on every rerun (~130 ms).  The cache is bounded by
    bytes (``ATTNVIZ_TRACE_CACHE_MB``, default 512), not by entries."""
    cache = _trace_cache()
    misses = cache.misses
    trace = cache.get(text, AttentionConfig(*config_values))
    if cache.misses != misses:
        _MALLOC_TRIM(0)  # a new run (and maybe an eviction) freed hundreds of MB
    return trace


def trace_key(trace: Trace) -> tuple:
    """What a view that outlives its script run keeps instead of the Trace: (text, config values)."""
    return (trace.text, dataclasses.astuple(trace.config))


def trace_of(key: tuple) -> Trace:
    """The Trace of ``trace_key``: shared from the cache, recomputed if it was evicted.

    Fragments and download callbacks outlive their script run, and Streamlit keeps a closed tab's
    session for two minutes: if they held the Trace itself, every session would pin ~210 MB per
    1024-token input past the cache's byte bound.  They hold this key instead."""
    return cached_trace(*key)


def _export(write, key: tuple, *args) -> bytes:
    """A download button's deferred data: the Trace is looked up (or recomputed) when the user clicks."""
    return write(trace_of(key), *args)


@dataclass(frozen=True)
class Context:
    settings: dict
    config: AttentionConfig
    trace: Trace
    stale: bool  # True when showing the last valid view because the current input is invalid

    @property
    def key(self) -> tuple:
        return trace_key(self.trace)


def _last_valid_trace() -> Trace | None:
    """The last valid view of this session (recomputed if the cache evicted it)."""
    last = ss.get("_last_valid")
    return None if last is None else cached_trace(*last)


def setup(page_title: str) -> Context | None:
    """Sidebar + cached run.  On invalid input: a plain message and the last valid view."""
    st.set_page_config(page_title=f"attnviz · {page_title}", page_icon=":material/visibility:", layout="wide")
    values = sidebar()
    _encoding()
    try:
        config = config_from_settings(values).validate()
        with st.spinner("Running attention…"):
            trace = cached_trace(values["text"], dataclasses.astuple(config))
    except InputError as exc:
        st.warning(markdown_escape(str(exc)), icon="✋")
        last = _last_valid_trace()
        _share_and_export(last)
        if last is None:
            return None
        st.caption("Showing the last valid view.")
        return Context(settings=values, config=last.config, trace=last, stale=True)
    ss["_last_valid"] = (values["text"], dataclasses.astuple(config))  # a key, not the arrays
    _share_and_export(trace)
    for note in trace.notes:
        st.info(markdown_escape(note), icon="ℹ️")
    return Context(settings=values, config=config, trace=trace, stale=False)


# --------------------------------------------------------------------------- view helpers shared by pages

WINDOW = 256  # largest side drawn at full resolution (every cell hoverable)


def beside_shape_diagram(trace: Trace, highlight: str):
    """The compact live shape diagram (``highlight`` = the stage on view) in a narrow left column;
    returns the wide column to its right.  Plain HTML, not a Graphviz chart: the browser lays a
    Graphviz chart out again on every settings change (~0.35 s); the Shapes page has the full one."""
    from attnviz import diagram

    diagram_col, view_col = st.columns([1, 3])
    with diagram_col:
        st.html(diagram.shape_flow_html(trace.shapes, trace.config, highlight=highlight))
        st.caption(diagram.head_dim_equation(trace.config) + " · full diagram: the Shapes page")
    return view_col


def variant_label(config: AttentionConfig) -> str:
    heads = f", {config.heads} heads × {config.head_dim}" if config.heads > 1 else ""
    return f"{VARIANTS[config.variant]}{heads}"


def plotly_config(filename: str) -> dict:
    """Modebar whose camera button downloads PNG or SVG (the sidebar's choice) under ``filename``."""
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": ss.get("_keep_image_format", "png"), "filename": filename, "scale": 2},
    }


@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def _grid_figure(text: str, config_values: tuple, stage: str):
    from attnviz import figures

    trace = cached_trace(text, config_values)
    config = trace.config
    return figures.heads_grid(trace.steps[stage][0], stage, causal=config.causal, dropout=config.active_dropout)


def heads_grid_figure(ctx: Context, stage: str):
    """The thumbnail grid of all heads, pooled once per input (cached), the focused head marked."""
    from attnviz import figures

    grid = _grid_figure(*ctx.key, stage)
    return figures.mark_focus(grid, ss.get("_keep_heads_focus", 0))


def focus_from_click(event, num_heads: int, key: str = "heads_focus") -> None:
    """A click on a thumbnail (its invisible scatter overlay) focuses that head."""
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    signature = repr(points)
    if not points or ss.get("_last_click") == signature:
        return
    ss["_last_click"] = signature
    head = points[0].get("customdata")
    if isinstance(head, list):
        head = head[0]
    if isinstance(head, int | float) and 0 <= int(head) < num_heads:
        ss[key] = int(head)
        ss[f"_keep_{key}"] = int(head)
        st.rerun()


def focus_from_row(event, num_heads: int, key: str = "heads_focus") -> None:
    """A row picked in the head statistics table focuses that head."""
    rows = (event or {}).get("selection", {}).get("rows", []) if event else []
    signature = repr(rows)
    if not rows or ss.get("_last_row_pick") == signature:
        return
    ss["_last_row_pick"] = signature
    if 0 <= rows[0] < num_heads:
        ss[key] = ss[f"_keep_{key}"] = int(rows[0])
        st.rerun()


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def _head_stats(text: str, config_values: tuple):
    import pandas as pd

    from attnviz import stats

    trace = cached_trace(text, config_values)
    table = pd.DataFrame(stats.head_statistics(trace.steps["weights"][0]))
    table.insert(0, "head", range(len(table)))
    return table


def head_stats_table(ctx: Context):
    """Per-head statistics of the weights (cached with the trace)."""
    return _head_stats(*ctx.key)


def stats_column_config(n: int) -> dict:
    """Each statistic as a bar in its cell, on the range it can take for ``n`` tokens (stats.stat_range)."""
    from attnviz import stats

    config = {"head": st.column_config.NumberColumn("head", format="%d", width="small")}
    for name, text in stats.STATS.items():
        low, high = stats.stat_range(name, n)
        config[name] = st.column_config.ProgressColumn(
            name, help=f"{text}. Bar: {low:g} … {high:.4g}", format="%.4f", min_value=low, max_value=high,
            width=128)  # all six fit beside the head column in the main area of a 1400-px window
    return config


def download_head_csv(trace: Trace, head: int, stage: str) -> None:
    from attnviz import export

    st.download_button(
        f"Download head {head} {stage} (CSV)",
        functools.partial(_export, export.weights_csv, trace_key(trace), head, stage),
        file_name=f"attnviz-head{head}-{stage}.csv", mime="text/csv", on_click="ignore", icon=":material/download:",
    )


def head_selector(key: str, num_heads: int) -> int:
    """Focused-head selector (persisted); falls back to head 0 when the head count shrinks."""
    bind = page_bind(key, 0, lambda head: isinstance(head, int) and 0 <= head < num_heads)
    if num_heads == 1:
        st.caption("One head.")
        return 0
    return st.selectbox("Focused head", list(range(num_heads)), format_func=lambda h: f"head {h}", **bind)


def window_selector(prefix: str, n: int, overview: bool = True) -> tuple[int, int, int]:
    """(row0, col0, size) of the full-resolution window; the whole map when n ≤ WINDOW."""
    if n <= WINDOW:
        return 0, 0, n
    last = n - WINDOW
    st.caption(
        f"{n} tokens: the focused view shows a {WINDOW}×{WINDOW} window at full resolution "
        "(every cell hoverable); move it with the sliders." + (" The overview is max-pooled." if overview else "")
    )
    cols = st.columns(2)
    in_range = lambda value: isinstance(value, int) and 0 <= value <= last  # noqa: E731
    row0 = cols[0].slider("First query row", 0, last, **page_bind(f"{prefix}_row0", 0, in_range))
    col0 = cols[1].slider("First key column", 0, last, **page_bind(f"{prefix}_col0", 0, in_range))
    return row0, col0, WINDOW


@st.fragment
def focused_head(key: tuple, stage: str) -> None:
    """The Heads page's focused head at full resolution (a window of it when n > WINDOW), with its CSV.

    A fragment, so picking a head or moving the window redraws only this part.  It takes the trace's
    key, not the Trace: Streamlit keeps a fragment (and its arguments) for the session's lifetime."""
    from attnviz import figures

    trace = trace_of(key)
    config = trace.config
    head = head_selector("heads_focus", trace.num_heads)
    row0, col0, size = window_selector("heads", trace.n)
    matrix = trace.attention_map(stage, head)
    window = matrix[row0 : row0 + size, col0 : col0 + size]
    fig = figures.attention_heatmap(
        window, trace.tokens, stage, causal=config.causal, dropout=config.active_dropout,
        title=f"head {head}: {figures.MAP_TITLES[stage]}", row_offset=row0, col_offset=col0,
    )
    if size < trace.n:
        overview_col, window_col = st.columns([1, 2])
        overview_col.plotly_chart(
            figures.overview_heatmap(matrix, stage, causal=config.causal, dropout=config.active_dropout,
                                     window=(row0, col0, size)),
            config=plotly_config(f"attnviz-head{head}-overview"),
        )
        window_col.plotly_chart(fig, config=plotly_config(f"attnviz-head{head}-{stage}"))
    else:
        st.plotly_chart(fig, config=plotly_config(f"attnviz-head{head}-{stage}"))
    download_head_csv(trace, head, stage)


STEP_TEXT = {
    "scores": "Each query is compared with every key: a dot product per (query, key) pair.",
    "scaled": "Divide by √dₖ so the scores' variance does not grow with the head size.",
    "masked": "Hide the future: scores above the diagonal become −∞, so softmax gives them weight 0.",
    "weights": "Softmax turns each query's row of scores into weights that sum to 1.",
    "dropped": "In training, dropout zeroes a random fraction p of the weights and scales the rest by 1/(1−p).",
    "context": "Each context vector is the weighted sum of the value vectors.",
}


def step_text(config: AttentionConfig, stage: str) -> dict:
    """What the stage does, and the line of the running source that does it."""
    from attnviz import source

    what = STEP_TEXT[stage]
    code = source.stage_code(config.variant, stage)
    if code is None:
        what = {
            "scaled": "The simplified version (section 3.3) does not scale: scaled = scores.",
            "dropped": "The simplified version (section 3.3) has no dropout: dropped = weights.",
        }.get(stage, what)
        code = "# this variant has no such line"
    elif stage == "masked" and not config.causal:
        code += "  # skipped: causal mask off"
    return {"what": what, "code": code}


def dropout_off_reason(config: AttentionConfig) -> str:
    if not config.spec.dropout:
        return "This variant has no dropout in the book: dropped = weights."
    if not config.train:
        return "Dropout is off (eval mode): dropped = weights. Turn on 'Dropout active' in the sidebar."
    return "Dropout p is 0: dropped = weights."


def shape_of(trace: Trace, stage: str) -> tuple:
    return tuple(trace.steps[stage].shape)


def qk_table(trace: Trace, head: int, max_rows: int = 64):
    """Query and key vectors of one head (first ``max_rows`` tokens) for the QKᵀ step."""
    import pandas as pd

    config = trace.config
    queries, keys = trace.steps["queries"][0], trace.steps["keys"][0]
    if config.spec.multi_head:
        span = slice(head * config.head_dim, (head + 1) * config.head_dim)
        queries, keys = queries[:, span], keys[:, span]
    rows = min(trace.n, max_rows)
    return pd.DataFrame({
        "token": list(trace.tokens[:rows]),
        "query": [", ".join(f"{v:.3f}" for v in q[:8]) + (" …" if len(q) > 8 else "") for q in queries[:rows]],
        "key": [", ".join(f"{v:.3f}" for v in k[:8]) + (" …" if len(k) > 8 else "") for k in keys[:rows]],
    })


def _vector_text(vector, digits: int = 4, shown: int = 8) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in vector[:shown]) + (" …" if len(vector) > shown else "")


def vector_table(trace: Trace, vectors, column: str, max_rows: int = 64):
    """One row per token: its vector (first 8 values, 4 decimals as the book prints them)."""
    import pandas as pd

    rows = min(trace.n, max_rows)
    return pd.DataFrame({"token": list(trace.tokens[:rows]), column: [_vector_text(v) for v in vectors[:rows]]})


def context_table(trace: Trace, head: int, max_rows: int = 64):
    context = trace.steps["context"][0]
    per_head = context[head] if context.ndim == 3 else context
    return vector_table(trace, per_head, "context vector", max_rows)
