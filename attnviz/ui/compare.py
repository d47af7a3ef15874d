"""The Compare page: every variant on the same tokens side by side, the equivalences between implementations measured
live, a user's module beside the book's MultiHeadAttention, and why the scores are divided by √dₖ.
``pages/compare.py`` calls :func:`draw`.

What the page runs is :mod:`attnviz.labs.compare`'s, cached by :mod:`attnviz.ui.compute`; the variants run at the
sizes of :func:`compared_sizes`.  The sidebar's Share link (``page_run.link``) is drawn once *Heatmap shows* is bound,
so the link carries the map this run draws."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, NamedTuple

import streamlit as st

from attnviz import variants
from attnviz.config import fitted_heads
from attnviz.labs import compare
from attnviz.tokens import counted
from attnviz.ui import compute, lab_selectors
from attnviz.ui.frame import Context, plotly_config, variant_label
from attnviz.ui.share import share_link
from attnviz.views import figures, saturation

if TYPE_CHECKING:
    from attnviz.config import AttentionConfig


def draw(page_run: Context) -> None:
    """The page below its title: what ran, the equivalences, the user's module beside MHA (when the sidebar runs one),
    every variant's map, and "Why ÷√dₖ?"."""
    trace, config = page_run.trace, page_run.trace.config
    base = compare.base_config(config, *compared_sizes(page_run))
    with st.spinner("Running every variant…"):
        result = compute.comparison(page_run.trace_key, dataclasses.astuple(base))
    st.caption(f"{counted(result.n)} · {compare.seeds_caption(result)} · eval mode (dropout off) · CPU · "
               f"{compare.heads_caption(result)}")
    if result.truncated:
        st.info(f"This run has {result.total_tokens:,} tokens; this page compares the first {result.n} "
                "to keep the cost down.", icon=":material/content_cut:")
    _equivalences(result)
    if trace.module_run is not None:
        _module_beside_mha(page_run, result, base)
    if config.rotary:
        st.caption("Rotary positions: the input embeddings have no learned positions, so the classes without rotation "
                   "(3.3–3.6.1, MLA) see no position information here.")
    _every_variant(page_run, result)
    _why_scaling(page_run)


class ComparedSizes(NamedTuple):
    """The sizes every variant runs at (:func:`compared_sizes`), in ``compare.base_config``'s order."""

    d_out: int
    num_heads: int
    window: int  # the sliding-window variant's W
    kv_heads: int  # the grouped-query variant's K/V groups (num_kv_groups)
    latent: int  # the latent variant's width (latent_dim)


def compared_sizes(page_run: Context) -> ComparedSizes:
    """The sizes every variant runs at: the sidebar's (a single-head class's run has 1 head and the simplified one
    d_out = d_in, but the other variants need the real values; the sliding-window, grouped-query and latent variants
    run the sidebar's Window W, K/V groups and latent width, which it holds whichever class is picked), or on a stale
    view (invalid input) those of the last valid run it shows.  A size that run's class does not hold — a single-head
    class's heads, the simplified class's d_out, the window, K/V groups or latent of a class without them — is the
    sidebar's, as its valid view had it; heads that do not divide the run's d_out (the sidebar's d_out changed since)
    are the nearest that do, and K/V groups or a latent the run's sizes cannot take are said on their card
    (``compare.set_aside_note``)."""
    settings = page_run.settings
    kv_heads, latent = int(settings["num_kv_groups"]), int(settings["latent_dim"])
    if not page_run.stale:
        return ComparedSizes(settings["d_out"], settings["num_heads"], int(settings["sliding_window_size"]),
                             kv_heads, latent)
    config = page_run.trace.config
    spec = config.spec
    d_out = config.d_out if spec.weights is not None else int(settings["d_out"])  # without weights: d_out = d_in
    num_heads = config.num_heads if spec.multi_head else int(settings["num_heads"])
    window = config.window if config.window is not None else int(settings["sliding_window_size"])
    if "num_kv_groups" in spec.settings and config.num_kv_groups is not None:  # not MQA's own 1
        kv_heads = config.num_kv_groups
    if config.latent_width is not None:
        latent = config.latent_width
    return ComparedSizes(d_out, fitted_heads(d_out, num_heads), window, kv_heads, latent)


# px: an equivalence card, as wide as a map: three a row beside the sidebar at 1,400 px, fewer where fewer fit; wide
# enough for its badge's measured number and its title's longest name (scaled_dot_product_attention) on one line
CARD_WIDTH = compare.MAP_WIDTH


def _equivalences(result: compare.Comparison) -> None:
    """Each equivalence check as a card, as many a row as fit (Streamlit wraps a horizontal container's elements)."""
    st.subheader("Equivalences, computed now")
    row = st.container(horizontal=True, gap="medium")
    for check in result.checks:
        with row.container(border=True, width=CARD_WIDTH):
            st.markdown(f"**{check.title}**")
            st.badge(check.badge, icon=check.icon, color=check.color)
            st.caption(compare.CHECK_NOTES[check.key])
            if check.key == "wrapper_mha":
                with st.expander("Why the raw outputs differ"):
                    st.markdown(compare.raw_difference_note(check))


def _module_beside_mha(page_run: Context, result: compare.Comparison, base: AttentionConfig) -> None:
    """The user's module beside the book's MultiHeadAttention on the same embeddings: head 0 of each, and a table."""
    trace = page_run.trace
    st.subheader(f"{trace.module_run.class_name} beside the book's MultiHeadAttention")
    st.caption("The same tokens and input embeddings; each with its own seeded weights, so the maps differ in "
               "values — compare the mask, how peaked the rows are, the shapes.")
    row = st.container(horizontal=True, gap="medium")  # side by side where two fit, else one above the other
    mine, book = (row.container(width=figures.PAIR_MAP_PX) for _ in range(2))
    with mine:
        st.plotly_chart(compare.module_heatmap(trace, how="head 0"), config=plotly_config("attnviz-compare-module"))
    with book:
        mha = next(v for v in result.variants if v.variant == variants.MHA)
        st.plotly_chart(compare.variant_heatmap(mha, result.tokens, "head 0", causal=base.causal,
                                                width=figures.PAIR_MAP_PX, show_scale=True),
                        config=plotly_config("attnviz-compare-mha"))
    st.dataframe(compare.module_vs_mha_rows(trace, mha), hide_index=True)


def _every_variant(page_run: Context, result: compare.Comparison) -> None:
    """*Heatmap shows*, the Share link, then each variant's map with its caption: as many a row as fit."""
    st.subheader("Every variant on the same tokens")
    how = lab_selectors.heatmap_choice()
    st.caption(compare.SCALE_NOTE)
    share_link(page_run.link)  # now that the URL holds the map this run draws
    with st.container(horizontal=True, gap="medium"):  # as many maps a row as fit: one on a phone, three or more wide
        for variant in result.variants:
            with st.container(width=compare.MAP_WIDTH):
                causal = variant.config.causal  # the sidebar's, or at the book's toy example its listing's
                fig = compare.variant_heatmap(variant, result.tokens, how, causal=causal,
                                              current=page_run.trace.config.variant)
                st.plotly_chart(fig, config=plotly_config(f"attnviz-compare-{variant.variant}"))
                st.caption(compare.variant_caption(variant, causal=causal, seed=result.book_listing))


def _why_scaling(page_run: Context) -> None:
    """Softmax saturation against dₖ, with and without ÷√dₖ, and this run's head where it has one."""
    st.subheader("Why ÷√dₖ?")
    random_qk, run, no_run = compute.scaling(page_run.trace_key)
    if run is None:
        st.markdown(saturation.EXPLANATION.split(" ★:")[0])
        st.caption(saturation.NO_RUN.format(why=no_run))
    else:
        st.markdown(saturation.EXPLANATION.format(dk=run["dk"], head=run["head"],
                                                  variant=variant_label(page_run.trace.config)))
    st.plotly_chart(saturation.scaling_ablation_figure(random_qk, run),
                    config=plotly_config("attnviz-scaling-ablation"))
