"""Streamlit glue — the only attnviz package that imports Streamlit; pages import it as ``ui``.

Every page calls :func:`setup` first.  It draws the shared sidebar, keeps the settings across page switches
and in the URL, and returns the cached Trace of this run.  A page the attention settings do not apply to (Train)
calls :func:`page_setup` instead: its sidebar has the page links only, and the settings are kept as they were.

Routing: attnviz uses the ``pages/`` folder's own routing (``app.py`` is the Heads view at ``/``),
so a shared link to any page works as the very first request to a fresh server: each page runs
``setup()`` itself.  Widget values are copied to non-widget ``_keep_*`` keys after every run and
written back before the widgets are drawn, so they survive page switches.

One module per job:

* ``urlstate`` — settings ↔ URL parameters ↔ AttentionConfig (no Streamlit calls);
* ``state``    — widget values kept across page switches (``_keep_*``), ``page_bind`` for page widgets;
* ``sidebar``  — the shared sidebar;
* ``cache``    — the server's byte-bounded trace cache, trace keys, the glibc memory tuning, the gc freeze;
* ``share``    — "Share & export": the link, the figure format, downloads computed on click;
* ``frame``    — ``setup()`` and the view helpers every page uses;
* ``layer_views`` — a page's views of one layer as a fragment, with the sidebar's Layer selectbox;
* ``heads``    — the Heads page's grid, statistics table and focused head;
* ``heads_views`` — the Heads page's views of one layer (drawn by ``layer_views.by_layer``);
* ``focus``    — the focused head, set by a click on the grid or a selected table row;
* ``why``      — what a selection on the focused map explains (one cell's weight, several cells summed);
* ``weights``  — the ``weights``/``layer`` settings' options, the model behind the choice, trained models;
* ``checkpoint`` — a checkpoint's next-token panel and layers × heads overview;
* ``compute``  — the Compare page's and the Pitfall lab's cached computations;
* ``head_labels`` — the Heads page's head types (label, score, first-token mass beside it);
* ``induction`` — the Induction lab's cached run and its widgets;
* ``train``    — the Train page: the background training job, its live view, the trained model as weights.
"""

# ruff: noqa: E402  (the warm-up starts between the imports, as soon as torch is imported)
from attnviz.ui.cache import TRACE_CACHE_MB, cached_trace, trace_key, trace_of, tune_memory, warm_up
from attnviz.ui.urlstate import DEFAULTS, config_from_settings

# A fresh server: torch is imported now (ui.cache imports it); the default view's tokenizer, 154 MB seeded
# embedding table and module are built in a thread (torch draws the table without the GIL) while this package
# imports pandas and the rest and the first page sets up its sidebar (ui.cache.warm_up; only in a runtime).
warm_up(config_from_settings(DEFAULTS))

# pandas next, once, before any module that builds a figure.  Plotly looks pandas up in sys.modules, where a
# module that another thread is still importing already sits half-initialised; with several Streamlit sessions
# starting together, a lazy first `import pandas` in one session made Plotly crash in the others ("partially
# initialized module 'pandas' has no attribute 'Series'", tests/browser/test_concurrency.py).  Every page builds
# figures only after importing this package, and Python's import lock holds other threads until this package
# (and so pandas) is fully imported.
import pandas  # noqa: F401

from attnviz.ui.checkpoint import layers_overview, next_token_panel, position_label
from attnviz.ui.focus import focus_from_grid, focus_from_row
from attnviz.ui.frame import (
    Context,
    beside_shape_diagram,
    page_setup,
    plotly_config,
    setup,
    variant_label,
    weights_caption,
)
from attnviz.ui.heads import (
    WINDOW,
    focused_head,
    head_selector,
    head_stats_table,
    heads_grid_figure,
    prefetch_next_layer,
    stats_columns,
    window_selector,
)
from attnviz.ui.layer_views import by_layer
from attnviz.ui.share import download_head_csv, share_and_export
from attnviz.ui.sidebar import PAGES, sidebar
from attnviz.ui.state import page_bind
from attnviz.ui.urlstate import (
    DEFAULT_TEXT,
    MAX_URL_TEXT,
    PRESET_DIMS,
    PRESETS,
    SETTING_KEYS,
    markdown_escape,
    settings_from_query,
    share_query,
)
from attnviz.ui.weights import register_trained_model, session_id

__all__ = [
    "DEFAULTS", "DEFAULT_TEXT", "MAX_URL_TEXT", "PAGES", "PRESETS", "PRESET_DIMS", "SETTING_KEYS", "TRACE_CACHE_MB",
    "WINDOW", "Context", "beside_shape_diagram", "by_layer", "cached_trace", "config_from_settings",
    "download_head_csv", "focus_from_grid", "focus_from_row", "focused_head", "head_selector", "head_stats_table",
    "heads_grid_figure", "prefetch_next_layer",
    "markdown_escape", "page_bind", "page_setup", "plotly_config", "settings_from_query", "setup", "share_and_export",
    "share_query", "sidebar", "stats_columns", "trace_key", "trace_of", "tune_memory", "variant_label",
    "window_selector", "layers_overview", "next_token_panel", "position_label", "weights_caption",
    "register_trained_model",
    "session_id",
]
