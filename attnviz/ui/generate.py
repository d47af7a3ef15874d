"""The Generate page's glue: the number of new tokens, the cached greedy generation of the sidebar's model, the
stepper (Step, Play/Stop in a fragment that reruns itself while playing), each step's views, and what a KV cache
costs (the variants' chart, the real models' table).  Without a language model under Weights the page offers a
small random GPT with a chosen attention (MHA, GQA, MQA, MLA, SWA), labelled as noise: it shows the cache's real
shapes (K/V heads, the latent, at most W keys).

Greedy generation is deterministic, so the page generates once (cached per model, prompt and count) and the
stepper shows one forward pass at a time: what the model computed at that step, never a replay of something else.

What the page shows follows the URL, so a link reproduces it: ``new_tokens``, ``random`` (the random GPT's
attention), ``step`` (while Play steps on, the step it started from: every step would be an entry of the browser's
history, and Play is one; the step it stops or ends on replaces it, so Back returns to the step Play started from),
``map_layer`` and ``head`` (the rows map's), and the cost chart's ``sizes`` (a real model's name) and ``dtype``.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attnviz import kv_cache, tokens, variants
from attnviz import weights as core_weights
from attnviz.models import generation
from attnviz.models import gpt as gpt_model
from attnviz.ui import weights as ui_weights
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.number_box import link_text, number_box
from attnviz.ui.share import file_name, share_link
from attnviz.ui.sidebar import module_message
from attnviz.ui.state import (
    forget_page_params,
    page_bind,
    page_param_notice,
    page_params_of,
    page_widgets_from_url,
    set_page_param,
    shown_page,
    take_refused,
    url_notices,
)
from attnviz.urlstate import (
    DTYPE,
    HEAD,
    MAP_LAYER,
    NEW_TOKENS,
    RANDOM,
    SIZES,
    STEP,
    ignored,
    parse_number,
    parse_option,
)
from attnviz.views import diagram, generation_figures
from attnviz.words import amount, markdown_escape

DEFAULT_NEW = 20
MAX_NEW = 1024  # the widget's bound: a model's context clips further, with a notice
PROMPT_SHOWN = 40  # the prompt's last tokens shown above each step
PLAY_INTERVAL = 0.6  # seconds between two steps while playing
# px: the top 5's columns, which fit half the page beside the sidebar at 800 px (a wider page shares out the rest)
TOP_RANK_PX, TOP_TOKEN_PX, TOP_PROB_PX = 42, 108, 72
NO_MODEL = ("Generation needs a language model: the book's Chapter 3 classes are one attention layer with no "
            "output head, so they predict no tokens. Pick a model under **Weights** in the sidebar — the "
            "**bundled model** is always there (2 layers trained by attnviz on repeated random tokens: it copies "
            "repeats and does not continue English; real continuations need a GPT-2 checkpoint); checkpoints you "
            "pass with `--checkpoint` or `ATTNVIZ_CHECKPOINTS`, and models trained on the Train page, are listed "
            "too.")
BUNDLED_NOTE = ("The bundled model (2 layers × 2 heads) was trained only on repeated random tokens, to form "
                "induction heads: it copies what a repeat in the prompt says comes next, does not continue English, "
                "and on plain text often repeats one token. Real continuations need a GPT-2 checkpoint under "
                "**Weights**: on the computer that runs attnviz, `pip install huggingface_hub && hf download "
                "openai-community/gpt2 config.json model.safetensors` puts GPT-2 in the Hugging Face cache, which "
                "**Weights** lists at the next reload; a checkpoint elsewhere (a file, or a folder of them) is "
                "listed when attnviz is started with `--checkpoint PATH` or `ATTNVIZ_CHECKPOINTS=FOLDER`.")
DTYPE_OWN = "own"  # the cost chart's dtype: the chosen model's own (fp32 for attnviz's models and the sidebar's)
DTYPE_CHOICES = (DTYPE_OWN, *kv_cache.DTYPE_BYTES)  # the dtype box's options, and the link's ``dtype``
RANDOM_NONE = "none"
RANDOM_KIND = "random"  # a ref ("random", attention, settings) of a small random GPT, built here, never loaded
RANDOM_SET_ASIDE = "_generate_random_set_aside"  # (the Weights ref, the notice) of a link's random GPT not used
# the sidebar's settings the random GPT takes (the rest, positions, it has GPT-2's), and whether a value fits it
_FITS = {"num_kv_groups": lambda value, preset: preset["n_heads"] % value == 0,
         "latent_dim": lambda value, preset: value <= preset["emb_dim"],
         "sliding_window_size": lambda value, preset: 1 <= value <= preset["context_length"]}
# the random GPT selectbox's options, and the link's ``random``: the registry's variants a GPT block can be
RANDOM_CHOICES = (RANDOM_NONE, *gpt_model.BY_VARIANT)
ROTARY_NOTE = ("The sidebar asks for rotary positions: they are not offered here. This random GPT has GPT-2's "
               "learned positions, so it runs with learned positions.")
ESTIMATOR_NAMES = (" Beware the name when you compare with rasbt's `memory_estimator_gqa.py`: its `n_kv_groups` is "
                   "a group size (K/V heads = n_heads ÷ n_kv_groups), while the GQA class's `num_kv_groups` and "
                   "`kv_cache_bytes`' `n_kv_heads` count K/V heads; `kv_cache_bytes` takes the script's `n_kv_groups` "
                   "too, as the script does.")
RANDOM_NOISE = ("**A small random GPT with {label}** ({sizes}). Its weights are random: its text is noise. "
                "It is here to show what this attention's KV cache really holds, step by step.")


def from_url() -> None:
    """A session's first visit: New tokens and the random GPT take the link's ``new_tokens`` (any text its box holds:
    :func:`attnviz.ui.number_box.link_text`) and ``random`` (one of the random GPT's attentions, or ``none``), the
    cost chart's Sizes and dtype its ``sizes`` (a real model's name, as the table lists it) and ``dtype`` (one of the
    dtypes offered); anything else is refused with a notice (the page then uses its default).  The step, layer and
    head shown are read where the generation is known (:func:`_stepper`, :func:`_step_views`)."""
    page_widgets_from_url("generate", {
        "generate_new": (NEW_TOKENS, functools.partial(link_text, bounds=(1, MAX_NEW), what="new tokens"),
                         f"using {DEFAULT_NEW}"),
        "generate_random": (RANDOM, functools.partial(parse_option, options=RANDOM_CHOICES, what="a random GPT "
                                                      "this page offers"),
                            "using the sidebar's attention if it is a bonus one, else none"),
        "generate_sizes": (SIZES, functools.partial(parse_option, options=[m.name for m in kv_cache.PRESETS],
                                                    what="a model the cost chart offers"),
                           "drawing the cost chart at the model's own sizes"),
        "generate_dtype": (DTYPE, functools.partial(parse_option, options=DTYPE_CHOICES, what="a dtype the cost "
                                                    "chart offers"), "drawing the cost chart in the model's own dtype"),
    })


@st.cache_resource(max_entries=4, ttl=3600, show_spinner=False)  # 2 layers, emb 128: mostly GPT-2's vocabulary's tables
def _random_model(attention: str, settings: tuple) -> gpt_model.GPTModel:
    return gpt_model.random_gpt(attention, **dict(settings))


def _load(ref) -> gpt_model.GPTModel:
    """The model behind a Weights ref (a CheckpointError in words with its listed name: ``ui.weights.load``), or a
    random GPT's ref ``(RANDOM_KIND, attention, settings)``."""
    if isinstance(ref, tuple) and ref[0] == RANDOM_KIND:
        return _random_model(ref[1], ref[2])
    return ui_weights.load(ref)


@st.cache_resource(max_entries=3, ttl=3600, show_spinner=False)  # a prefill's weights can be (12, 12, 1024, 1024)
def _generation(ref, prompt: tuple[int, ...], max_new: int) -> generation.Generation:
    return generation.generate(_load(ref), list(prompt), max_new)


@st.cache_resource(max_entries=3, ttl=3600, show_spinner=False)  # frozen StepChecks, one per step
def _checks(ref, prompt: tuple[int, ...], max_new: int) -> list[generation.StepCheck]:
    return generation.check_steps(_load(ref), _generation(ref, prompt, max_new))


def show(page_run: Context) -> None:
    """The page below its title: generation for a model under Weights (or how to pick one), then the costs; the
    sidebar's Share link (its ``PageEntry.draws_link``) drawn by the stepper once the step, layer and head are
    bound, or here when there is no generation to show."""
    url_notices("generate_new")  # until New tokens is set on the page
    ref = page_run.config.checkpoint if page_run.weights is not None and page_run.weights.checkpoint else None
    sizes = None
    if ref is None:
        needs_model = st.empty()  # above the random GPT's choice, filled only while no language model is picked
        ref = _random_choice(page_run)
        if ref is None:
            needs_model.info(NO_MODEL, icon=":material/info:")
    else:
        _random_set_aside(page_run, ref)  # a model under Weights: no random GPT offered
        if page_run.weights.option.source == "bundled":
            st.caption(BUNDLED_NOTE)
    linked = False
    if ref is not None:
        try:
            model = _load(ref)
            sizes = core_weights.sizes(model)
            linked = _generate_section(page_run, ref)
        except ValueError as exc:  # a checkpoint that cannot be loaded now: no folder of the server's
            st.warning(markdown_escape(module_message(str(exc))), icon=":material/back_hand:")
    if not linked:  # no generation shown: the session's New tokens, step, layer and head wait for one, linked
        share_link(page_run.link)
    st.divider()
    cost_section(page_run, sizes)


def _random_set_aside(page_run: Context, ref) -> None:
    """A model is under Weights, so no random GPT is offered: the URL drops ``random``, and a random GPT the link
    asked for (one this session's runs did not write) is said to be set aside, until Weights changes."""
    refused = take_refused("generate_random")  # a link's value no random GPT has: taken out of the URL already
    raw = st.query_params.get(RANDOM, refused)
    if raw is not None and raw != RANDOM_NONE and page_params_of(shown_page()).get(RANDOM) != raw:
        st.session_state[RANDOM_SET_ASIDE] = (ref, ignored(
            [(RANDOM, raw)], f"the page generates with {page_run.weights.option.label}, the model under Weights. Set "
            "Weights to "
            f"{core_weights.BOOK_LABEL} to generate with a small random GPT."))
    forget_page_params(RANDOM)
    set_aside = st.session_state.get(RANDOM_SET_ASIDE)
    if set_aside is not None and set_aside[0] == ref:
        st.warning(markdown_escape(set_aside[1]), icon=":material/back_hand:")
    else:
        st.session_state.pop(RANDOM_SET_ASIDE, None)  # other weights: the link's random GPT is no longer the news


def _random_choice(page_run: Context) -> tuple | None:
    """Offer a small random GPT with one of the block attentions; preselect the sidebar's variant when it is one of
    the bonus ones.  Returns its ref ``(RANDOM_KIND, attention, settings)``, or None."""
    names = list(RANDOM_CHOICES)
    bonus = variants.MODERN
    default = page_run.config.variant if page_run.config.variant in bonus else RANDOM_NONE
    url_notices("generate_random")
    take_refused("generate_random")  # said by the notice above: not to be said again under a model
    attention = st.selectbox(
        "Or generate with a small random GPT", names,
        **page_bind("generate_random", default, names.__contains__, url=RANDOM),
        format_func=lambda name: "no, thanks" if name == RANDOM_NONE else
        f"a small random GPT with {variants.LABELS[name].split(' (')[0].lower()}",
        help="A 2-layer GPT with GPT-2's vocabulary and random weights: its text is noise, but its KV cache has "
             "the real shapes of that attention — K/V heads for GQA and MQA, one latent per token for MLA, at "
             "most W keys for a sliding window. The sidebar's K/V groups, latent width or window are used when "
             "the sidebar shows the same attention and they fit this model.")
    if attention == RANDOM_NONE:
        return None
    settings, notes = random_settings(page_run.config, attention)
    cfg = {**gpt_model.RANDOM_GPT_CONFIG, **settings}
    sizes = [f"{cfg['n_layers']} layers", f"{cfg['n_heads']} heads of {cfg['emb_dim'] // cfg['n_heads']}",
             f"emb_dim {cfg['emb_dim']}", f"context {cfg['context_length']}", *random_sizes(attention, cfg)]
    label = variants.LABELS[attention].split(" (")[0].lower()
    st.warning(RANDOM_NOISE.format(label=label, sizes=", ".join(sizes)), icon=":material/casino:")
    if page_run.config.rotary:
        notes.append(ROTARY_NOTE)
    for note in notes:
        st.caption(markdown_escape(note))
    return (RANDOM_KIND, attention, tuple(sorted(settings.items())))


def random_sizes(attention: str, cfg: dict) -> list[str]:
    """What the random GPT's attention adds to its sizes, from its record: its K/V heads where its heads share them
    (``Variant.grouped``: the record's fixed ``kv_groups``, else ``cfg``'s ``num_kv_groups``), its latent width and
    its window where its ``settings`` have them."""
    spec = variants.get(attention)
    sizes = []
    if spec.grouped:
        sizes.append(amount(spec.kv_groups or cfg["num_kv_groups"], "K/V head"))
    if "latent_dim" in spec.settings:
        sizes.append(f"latent_dim {cfg['latent_dim']}")
    if "sliding_window_size" in spec.settings:
        sizes.append(f"window W = {cfg['sliding_window_size']}")
    return sizes


def random_settings(config, attention: str) -> tuple[dict, list[str]]:
    """The random GPT's settings for ``attention``: the sidebar's (K/V groups, latent width, window: those of the
    record's ``settings``; its positions are GPT-2's learned ones) when the sidebar shows that attention, sets them and
    they fit; else the preset's.  Returns (overrides, notes on what was not used)."""
    if config.variant != attention:
        return {}, []
    preset = gpt_model.RANDOM_GPT_CONFIG
    overrides, notes = {}, []
    for name in variants.get(attention).settings:
        if name not in _FITS or getattr(config, name) is None:
            continue
        value = int(getattr(config, name))
        if _FITS[name](value, preset):
            overrides[name] = value
        elif name == "sliding_window_size":  # a window longer than the context would keep every token
            notes.append(f"The sidebar's {name} = {value} is longer than this model's context of "
                         f"{preset['context_length']} tokens: it uses {preset[name]}.")
        else:
            notes.append(f"The sidebar's {name} = {value} does not fit this {preset['n_heads']}-head, "
                         f"{preset['emb_dim']}-wide model: it uses {preset[name]}.")
    return overrides, notes



def _generate_section(page_run: Context, ref) -> bool:
    """New tokens, the cached generation and its stepper; True when the stepper draws the Share link (there is a
    generation to show)."""
    prompt = tokens.encode(page_run.settings["text"]) if isinstance(page_run.settings.get("text"), str) else []
    if not prompt or not page_run.settings["text"].strip():
        st.warning("The prompt is empty: type a text in the sidebar's **Text** box, and the model continues it.",
                   icon=":material/back_hand:")
        return False
    max_new = number_box(
        st, "New tokens", "generate_new", DEFAULT_NEW, (1, MAX_NEW), f"the page generates {DEFAULT_NEW}",
        url=NEW_TOKENS,
        help=f"1 … {MAX_NEW:,}. How many tokens to generate, greedily (the most likely each time). Prompt + new tokens "
             "must fit the model's context: a long prompt keeps its end so that they fit (at least half the context); "
             "more are clipped. A notice says so.")
    # a forward pass per token: hundreds of tokens of a GPT-2 take minutes on a CPU, so the spinner counts the time
    spinner = ("Generating 1 new token with the KV cache, one forward pass…" if int(max_new) == 1 else
               f"Generating up to {int(max_new):,} new tokens with the KV cache, one forward pass each…")
    with st.spinner(spinner, show_time=True):
        result = _generation(ref, tuple(prompt), int(max_new))
    for notice in result.notices:
        st.info(markdown_escape(notice), icon=":material/info:")
    key = (ref, tuple(prompt), int(max_new))
    if st.session_state.get("_generate_key") != key:  # a new generation starts at its prefill
        st.session_state["_generate_key"] = key
        st.session_state["_generate_step"] = 0
        st.session_state["_generate_playing"] = False
    st.session_state["_generate_page_run"] = True  # the fragment's first run in this page run does not advance
    playing = bool(st.session_state.get("_generate_playing"))
    st.fragment(_stepper, run_every=PLAY_INTERVAL if playing else None)(ref, key, result, page_run.link)
    return True


def _stepper(ref, key: tuple, result: generation.Generation, link: DeltaGenerator | None) -> None:
    """Step, Play/Stop, Back and the views of the current step; while playing, each timed rerun shows the next.  The
    step shown follows the URL (``step``: the link's on a session's first visit), except while playing: the URL keeps
    the step Play started from (every step would be an entry of the browser's history, and a step left out of the
    URL would be an entry of the prefill, which Back would show) until Play stops or ends; the Share link
    (``link``'s place) is drawn here, after the step, layer and head are bound."""
    last = len(result.steps) - 1
    page_widgets_from_url("generate_step", {"_generate_step": (
        STEP, functools.partial(parse_number, low=0, high=last, what="this generation's steps"),
        "showing the prefill")})
    if st.session_state.get("_generate_playing") and not st.session_state.pop("_generate_page_run", False):
        st.session_state["_generate_step"] = min(st.session_state.get("_generate_step", 0) + 1, last)
    st.session_state.pop("_generate_page_run", None)
    index = min(max(int(st.session_state.get("_generate_step", 0)), 0), last)
    playing = bool(st.session_state.get("_generate_playing"))
    url_notices("_generate_step")
    # a row as wide as its buttons' labels: a column of a fixed share truncates them on a narrow page
    bar = st.container(horizontal=True, vertical_alignment="center")
    # Step and Prefill change the step in a callback, before this rerun draws anything: every button below is
    # drawn for the step shown (a click handled after them would leave Step disabled after Prefill)
    bar.button("Step", icon=":material/skip_next:", disabled=index >= last or playing, key="generate_next",
               help="Generate the next token: one forward pass that feeds only the new token.",
               on_click=_go_to, args=(index + 1,))
    if playing:
        if bar.button("Stop", icon=":material/stop:", key="generate_stop"):
            st.session_state["_generate_playing"] = False
            st.rerun()
    elif bar.button("Play", icon=":material/play_arrow:", disabled=index >= last, key="generate_play"):
        st.session_state["_generate_playing"] = True
        st.rerun()
    bar.button("Prefill", icon=":material/first_page:", disabled=index == 0 or playing, key="generate_back",
               help="Back to step 0: the prompt, fed at once.", on_click=_go_to, args=(0,))
    if playing and index >= last:
        st.session_state["_generate_playing"] = False
        st.rerun()
    where = (f"prefill: {_the_prompt_tokens(result.prompt_length)} in one forward pass" if index == 0 else
             f"one new token fed at position {result.steps[index].position}")
    bar.markdown(f"**Step {index} of {last}** · {where}", width="stretch")
    if not playing:  # Play is one entry of the history: the URL keeps the step it started from until it ends
        set_page_param(STEP, None if index == 0 else index)  # the prefill: the page's default
    _step_views(ref, key, result, index)
    share_link(link)  # the URL holds the step, layer and head this run draws


def _the_prompt_tokens(n: int) -> str:
    """"the 1 prompt token", "the 12 prompt tokens"."""
    return "the 1 prompt token" if n == 1 else f"the {n:,} prompt tokens"


def top_k_frame(pieces: list[str], probs: list[float]) -> pd.DataFrame:
    """The top k, most likely first: its rank (1: the greedy choice), its display piece and its probability in
    percent (the grid and its CSV show the same number).  A table, not a chart: it is redrawn at every step, and the
    browser draws a table far quicker than a second Plotly chart (benchmarks/README.md, "A step of the Generate page
    in Chromium", item 2)."""
    return pd.DataFrame({"rank": range(1, len(pieces) + 1), "token": list(pieces),
                         "probability": [100 * float(prob) for prob in probs]})


def top_k_columns() -> dict:
    """``st.dataframe`` column config of :func:`top_k_frame`: widths that fit half the page beside the sidebar at
    800 px (a wider page shares out the rest), the token whole rather than a bar beside the probability, and the
    probability with three significant digits — a random GPT spreads its guess over 50,257 tokens, where a fixed
    number of decimals shows 0.00%."""
    return {
        "rank": st.column_config.NumberColumn(width=TOP_RANK_PX, help="1 is the most likely: the token chosen."),
        "token": st.column_config.TextColumn(width=TOP_TOKEN_PX, help="The token's piece; · is a space."),
        "probability": st.column_config.NumberColumn(
            width=TOP_PROB_PX, format="%.3g%%",
            help="The model's probability for this token, in percent (as the CSV has it)."),
    }


def _go_to(index: int) -> None:
    st.session_state["_generate_step"] = index
    st.session_state.pop(page_param_notice("_generate_step"), None)  # the user's own step: the link's is moot


def _pieces(token_ids: list[int]) -> list[str]:
    """Display pieces ("·cat", "\\n"): a space or a newline stays visible."""
    return [token.piece for token in tokens.pieces(list(token_ids))]


def _step_views(ref, key: tuple, result: generation.Generation, index: int) -> None:
    step = result.steps[index]
    labels = [f"{i}:{piece}" for i, piece in enumerate(_pieces(result.token_ids))]
    # halves: the top 5's three columns need ~230 px, which half the page leaves them beside the sidebar at 800 px
    text_col, top_col = st.columns(2)
    with text_col:
        shown = result.token_ids[: result.prompt_length + index]
        tail = max(0, result.prompt_length - PROMPT_SHOWN)  # a long prompt: its end (the sidebar has all of it)
        prompt_text = ("…" if tail else "") + tokens.decode(shown[tail: result.prompt_length])
        new_text = tokens.decode(shown[result.prompt_length:])
        # no bold: Markdown leaves "**" literal after a prompt that ends with a letter
        st.markdown(f"{markdown_escape(prompt_text)}:orange-background[{markdown_escape(new_text)}]")
        if index == 0:
            st.metric("New token", "—", help="The prefill computes the prompt's keys and values and the first "
                                             "prediction; Step feeds the first new token.")
        else:
            st.metric("New token", _pieces([step.fed[-1]])[0],
                      help="Chosen by the previous step (the top 5 beside), fed alone in this step.")
        _badge(ref, key, index)
    with top_col:
        chooser = result.steps[index - 1] if index else step
        title = "The new token, chosen from the top 5" if index else "The next token, from the top 5"
        st.markdown(f"**{title}**")
        st.dataframe(top_k_frame(_pieces(chooser.top_ids), chooser.top_probs), hide_index=True, height="content",
                     key="generate_top_k", column_config=top_k_columns())

    n_layers, n_heads = step.weights.shape[:2] if step.weights is not None else (0, 0)
    # the map takes the page's width (beside the cache its key labels have no room); the cache comes below it
    map_col, cache_col = st.container(), st.container()
    with map_col:
        layer_col, head_col, _ = st.columns([1, 1, 2])
        # kept across page switches; another model, with fewer layers or heads, starts at 0
        page_widgets_from_url("generate_map", {
            "generate_layer": (MAP_LAYER, functools.partial(parse_number, low=0, high=n_layers - 1,
                                                            what=f"the layers of this {n_layers}-layer model"),
                               "showing layer 0"),
            "generate_head": (HEAD, functools.partial(parse_number, low=0, high=n_heads - 1,
                                                      what=f"the heads of this {n_heads}-head model"),
                              "showing head 0")})
        url_notices("generate_layer", "generate_head")
        layer = layer_col.selectbox("Layer", range(n_layers),
                                    **page_bind("generate_layer", 0, range(n_layers).__contains__, url=MAP_LAYER))
        head = head_col.selectbox("Head", range(n_heads),
                                  **page_bind("generate_head", 0, range(n_heads).__contains__, url=HEAD))
        if index == 0:
            rows = [step.weights[layer, head, -1]]  # the prompt's last row: it chose the first new token
            row_labels = [f"{labels[result.prompt_length - 1]} (prompt)"]
            positions = [result.prompt_length - 1]
        else:
            rows = [result.steps[j].weights[layer, head, 0] for j in range(1, index + 1)]
            row_labels = [labels[result.steps[j].position] for j in range(1, index + 1)]
            positions = [result.steps[j].position for j in range(1, index + 1)]
        n_keys = result.prompt_length + index
        # a window layer's rows are widened with 0 for the keys it dropped: the map leaves them empty, as not cached
        window = _layer_window(ref, layer)
        z = generation_figures.new_rows(rows, n_keys, positions=positions, window=window)
        st.plotly_chart(generation_figures.rows_figure(
            z, row_labels, labels[:n_keys], prompt_length=result.prompt_length,
            title=f"layer {layer}, head {head}: each new token's query row over the cached keys"),
            config=plotly_config(file_name("attnviz-generate", f"layer{layer}", f"head{head}", f"step{index}")),
            key="generate_map", width="content")  # as wide as its square cells: the colour bar beside them
    with cache_col:
        flow_col, held_col = st.columns([2, 3])
        if layer is not None and step.cache_shapes[layer]:  # None: a model without layers; {}: no cache
            # the shape diagram of the selected layer's cache: the fed tokens' slice, concatenated onto it
            flow_col.html(diagram.cache_flow_html(step.cache_shapes[layer], len(step.fed),
                                                  step.position + len(step.fed), layer, step.cache_token_axes[layer]))
        flow_col.metric("KV cache held", kv_cache.format_bytes(step.cache_bytes),
                        help="What every layer's cache holds after this step (float32): cache_k and cache_v, or "
                             "MLA's latent cache_c_kv.")
        model = None
        with held_col, ui_weights.said_if_unreadable():  # a step's rerun reads the model: changed on disk since?
            model = _load(ref)
        if model is not None:
            held_col.markdown(generation.cache_holds(model))
        # under both columns, as wide as its shapes: beside the diagram a long shape ("(1, 1024, 12, 64)") leaves
        # the bytes no room at 800 px
        cache = _cache_table(step)
        st.dataframe(cache, hide_index=True, width="content", height="content", key="generate_cache_table",
                     column_config=_cache_columns(cache))
        if model is not None:
            st.caption(_cache_formula(generation.cache_settings(model), result.prompt_length + index))


def _layer_window(ref, layer: int | None) -> int | None:
    """The sliding window of the model's ``layer`` (None: a full layer, or a model that cannot be read now)."""
    try:
        windows = generation.layer_windows(_load(ref))
    except ValueError:
        return None
    return windows[layer] if layer is not None and 0 <= layer < len(windows) else None


def _cache_formula(settings: dict, n_tokens: int) -> str:
    """The held bytes again, from a ``kv_cache_bytes`` call that runs as shown (every required size in it) and gives
    the number shown, with the formula in words."""
    shown = {"context_length": n_tokens, **{name: value for name, value in settings.items() if value is not None}}
    if settings["latent_dim"] is not None:  # MLA caches a latent: its K/V heads and head_dim change nothing
        shown.pop("n_kv_heads", None)
        shown.pop("head_dim", None)
        words = f"b × n × latent_dim × {kv_cache.dtype_bytes(settings['dtype'])} per layer"
    else:
        words = f"b × n × head_dim × kv_heads × 2 (K and V) × {kv_cache.dtype_bytes(settings['dtype'])} per layer"
    if settings["sliding_window_size"] is not None:
        a, b = kv_cache.parse_ratio(settings["swa_ratio"])
        words += (f", with n at most the window W on the window layers (swa_ratio {a}:{b}: {a} window, then {b} full, "
                  "block after block)" if b else ", with n at most the window W")
    formula = kv_cache.kv_cache_bytes(**shown)  # the call shown, as shown
    args = ", ".join(f"{name}={value!r}" for name, value in shown.items())
    return f"`kv_cache_bytes({args})` = {formula:,} bytes: {words}."


def _cache_table(step: generation.Step) -> pd.DataFrame:
    rows = []
    for layer, shapes in enumerate(step.cache_shapes):
        row = {"layer": layer}
        for name, shape in shapes.items():
            row[name] = "(" + ", ".join(str(s) for s in shape) + ")"
        row["bytes"] = sum(4 * int(np.prod(shape)) for shape in shapes.values())
        rows.append(row)
    return pd.DataFrame(rows)


def _cache_columns(table: pd.DataFrame) -> dict:
    """``st.dataframe`` column config of :func:`_cache_table`: the layer and the bytes as numbers, each tensor's
    shape as text."""
    columns = {name: st.column_config.TextColumn(help=f"The shape of `{name}` after this step.")
               for name in table.columns if name not in ("layer", "bytes")}
    return {"layer": st.column_config.NumberColumn(help="The block whose attention keeps this cache."), **columns,
            "bytes": st.column_config.NumberColumn(format="localized", help="What this layer's cache holds (float32).")}


def _badge(ref, key: tuple, index: int) -> None:
    try:
        check = _checks(ref, key[1], key[2])[index]
    except ValueError as exc:
        st.warning(markdown_escape(module_message(str(exc))), icon=":material/back_hand:")
        return
    numbers = (f"weights rows max |Δ| = {check.weights_diff:.1e}, logits max |Δ| = {check.logits_diff:.1e} "
               f"({check.logits_relative_diff:.1e} of the largest)")
    if check.ok:
        st.success(f"Equals the uncached forward: {numbers}", icon=":material/check_circle:")
    else:
        st.error(f"Differs from the uncached forward: {numbers}", icon=":material/error:")


def cost_section(page_run: Context, sizes) -> None:
    """KV-cache bytes against the context length for MHA, GQA, MQA, MLA, SWA and SWA+GQA at the chosen sizes, and
    the real models' caches at their full context."""
    st.subheader("What the cache costs")
    if sizes is not None:  # the model's own K/V heads, latent or window where its attention has one
        # its window on the layers that have one: a checkpoint's schedule may mix window and full layers
        window = {"sliding_window_size": sizes.sliding_window_size, "swa_ratio": sizes.swa_ratio} \
            if sizes.sliding_window_size and sizes.swa_ratio else {}
        own = ("this model", {"emb_dim": sizes.emb_dim, "n_heads": sizes.num_heads, "n_layers": sizes.n_layers,
                              "n_kv_heads": sizes.n_kv_heads, "latent_dim": sizes.latent_dim, **window},
               sizes.context_length)
    else:
        config = page_run.config
        own = ("the sidebar's sizes", {"emb_dim": config.d_out, "n_heads": config.num_heads, "n_layers": 1,
                                       **sidebar_settings(config)}, config.context_length)
    names = [own[0], *[m.name for m in kv_cache.PRESETS]]
    url_notices("generate_sizes", "generate_dtype")
    # the dtype box a third of the row: at 900 px its label and "own" still show whole
    pick_col, dtype_col = st.columns([2, 1])
    picked = pick_col.selectbox("Sizes", names,
                                **page_bind("generate_sizes", names[0], names.__contains__, url=SIZES),
                                help="Each line is the model with one attention; its own attention's line is the "
                                     "model as it is.")
    model = None if picked == own[0] else kv_cache.preset(picked)
    own_dtype = model.dtype if model is not None else "fp32"  # attnviz runs its models in float32
    dtype = dtype_col.selectbox(
        "dtype", DTYPE_CHOICES, **page_bind("generate_dtype", DTYPE_OWN, DTYPE_CHOICES.__contains__, url=DTYPE),
        # a fixed label: the browser keeps an option's label when only its text changes (the title names the dtype)
        help="Bytes per number in the cache. \"own\": the dtype the model is published in (its config's "
             "torch_dtype, as in the table below); fp32 for attnviz's models and the sidebar's sizes. The chart's "
             "title names the dtype it uses.")
    if dtype == DTYPE_OWN:
        dtype = own_dtype
    if model is None:
        base, context = dict(own[1]), own[2]
        settings = kv_cache.variant_settings(**base, context_length=context)
        # the K/V heads the GQA lines would take: the sidebar's GQA's, or the model's own where they are not MHA's
        chosen = base.get("gqa_kv_heads", base.get("n_kv_heads"))
        whose = "the sidebar's GQA" if "gqa_kv_heads" in base else own[0]
    else:
        context, settings = model.context_length, model.variant_settings()
        chosen, whose = model.n_kv_heads, model.name
    if whose != "the sidebar's GQA" and chosen == settings["MHA"]["n_heads"]:
        chosen = None  # an MHA model's own K/V heads: nothing to say about the GQA lines
    lengths = kv_cache.chart_lengths(settings, max(131072, context))  # from below the window: its line levels off
    curves = kv_cache.curves(settings, lengths, dtype=dtype)
    labels = {name: kv_cache.describe(name, kwargs) for name, kwargs in settings.items()}
    st.plotly_chart(generation_figures.kv_bytes_figure(
        lengths, curves, labels, marker_at=context,
        title=f"KV cache of {picked} with each attention ({dtype}, batch 1); dotted: its context length"),
        config=plotly_config("attnviz-generate-kv-cache-bytes"), key="generate_cost_chart")
    if model is not None:
        latent_source = f"{model.name}'s own ({model.latent_text})" if model.latent_dim else None
    elif own[1].get("latent_dim"):
        latent_source = "this model's own" if sizes is not None else "the sidebar's latent width"
    else:
        latent_source = None  # the book's default, as a run's MLA at these sizes
    for note in (kv_cache.gqa_note(settings, settings["MHA"]["n_heads"], chosen, whose),
                 kv_cache.latent_note(settings, latent_source)):
        if note is not None:
            st.caption(note)
    st.caption("The book's estimator formulas (bonus material ch04/04_gqa, 05_mla, 06_swa), computed by "
               "`attnviz.kv_cache_bytes`." + ESTIMATOR_NAMES)
    # the model and its cache first, pinned: a narrow page scrolls the sizes behind them
    st.dataframe(presets_table(), hide_index=True, key="generate_presets", column_config={
        "model": st.column_config.TextColumn(pinned=True),
        "KV cache at full context": st.column_config.TextColumn(
            alignment="right", help="batch 1, in the dtype; GB = 1000³ bytes, as the book's estimators print them"),
        "bytes": st.column_config.NumberColumn(format="localized", help="the cache at full context in bytes"),
        "window": st.column_config.TextColumn(alignment="right", help="the sliding window of the layers that have "
                                              "one; — for a model without"),
        "K/V heads": st.column_config.TextColumn(alignment="right", help="K/V heads a layer caches; — for MLA, "
                                                 "which caches one latent per token instead (the latent column)"),
        "latent": st.column_config.TextColumn(
            alignment="right", width=140,
            help="MLA's cached width per token and layer: the compressed K/V latent plus the rotary key its heads "
                 "share"),
        "source": st.column_config.TextColumn(help="the Hugging Face repo whose config.json the sizes are from")})


def sidebar_settings(config) -> dict:
    """The sidebar's own K/V groups, latent width and window, as :func:`kv_cache.variant_settings` takes them: each
    only where the sidebar's attention has that setting (GQA's K/V groups, MLA's latent, SWA's window, its default
    included); what the sidebar leaves open is left to the chart's fill-ins."""
    if config.module is not None or config.variant not in variants.VARIANTS:
        return {}
    out = {}
    if "num_kv_groups" in config.spec.settings:
        out["gqa_kv_heads"] = config.kv_groups
    if config.latent_width is not None:
        out["latent_dim"] = config.latent_width
    if config.window is not None:
        out.update(sliding_window_size=config.window, swa_ratio="1:0")  # every layer of the sidebar's slides
    return out


def presets_table() -> pd.DataFrame:
    """The real models' caches at full context, one row each: the model, its attention and its cache first (what a
    narrow page shows before it scrolls), then the sizes that make it."""
    rows = []
    for model in kv_cache.PRESETS:
        rows.append({"model": model.name, "attention": model.attention,
                     "KV cache at full context": kv_cache.format_bytes(model.bytes()), "dtype": model.dtype,
                     "context": model.context_length, "layers": model.n_layers, "heads": model.n_heads,
                     "K/V heads": model.kv_heads_text, "head_dim": model.head_dim or -(-model.emb_dim // model.n_heads),
                     "latent": model.latent_text, "window": model.window_text, "bytes": model.bytes(),
                     "source": model.source})
    return pd.DataFrame(rows)
