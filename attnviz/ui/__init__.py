"""Streamlit glue — the only attnviz package that imports Streamlit; ``app.py`` and the pages import it as ``ui``.

How a run flows: ``app.py`` hands the pages to ``st.navigation`` (:func:`~attnviz.ui.navigation.navigate`) and, around
``page.run()``, :func:`app_frame` draws the page config and the shared sidebar — on every page, so its widgets keep
their values across page switches by themselves.  The page then calls :func:`setup`: the settings as one run's
:class:`Context` (the text, the ``AttentionConfig``, the cached Trace — none on a page that draws no run of the text,
``PageEntry.text_run``: Benchmark, the Induction lab, Generate).  A page the settings do not apply to
(Train) calls :func:`page_setup`; its sidebar shows the settings folded away.  A page script that runs without
``app.py`` (a fresh server's first request for ``/steps?…``) is rerun through it by ``setup``/``page_setup``.

The settings are bound to the URL in :mod:`~attnviz.ui.state` (read on a session's first run, written on every
run; their defaults, their parsing and their AttentionConfig are :mod:`attnviz.urlstate`'s, below Streamlit); page
widgets (the focused head, a stage) are kept while their page is not shown by ``state.keep_widgets``.

One module per job:

* ``navigation`` — the pages ``app.py`` navigates between; a page script run without ``app.py`` rerun through it;
* ``state``    — the settings' widget state bound to the URL, page widgets kept across page switches, ``page_bind``;
* ``sidebar``  — the shared sidebar, drawn by ``app.py``;
* ``cache``    — the server's byte-bounded trace cache and trace keys;
* ``memory``   — the glibc memory tuning and the gc freeze of the server's imports;
* ``share``    — "Share & export": the link, the figure format, downloads computed on click;
* ``frame``    — ``app_frame()`` (``app.py``), ``setup()`` and the view helpers every page uses;
* ``layer_views`` — a page's views of one layer as a fragment, with the sidebar's Layer selectbox;
* ``heads``    — the Heads page's grid, statistics table and focused head;
* ``heads_views`` — the Heads page's views of one layer (drawn by ``layer_views.draw_layer_views``);
* ``steps``    — the Steps page: one head's stage as a before/after pair beside the shape diagram, and its source;
* ``focus``    — the focused head, set by a click on the grid or a selected table row;
* ``why``      — what a selection on the focused map explains (one cell's weight, several cells summed);
* ``interventions`` — knock-outs, ‖weight × value‖, rollout and the logit lens (the Heads page, the Induction lab);
* ``module_check`` — the Check panel of a user's module (the rules on this run's tokens);
* ``weights``  — the ``weights``/``layer`` settings' options, the model behind the choice, trained models;
* ``checkpoint`` — a checkpoint's next-token panel and layers × heads overview;
* ``compare``  — the Compare page: every variant's map, the equivalences, a user's module beside MHA, "Why ÷√dₖ?";
* ``compute``  — the Compare page's and the Pitfall lab's cached computations;
* ``lab_selectors`` — the Compare page's and the Pitfall lab's selectors, bound to the URL;
* ``pitfalls`` — the Pitfall lab: a bug's correct and buggy versions side by side, the causality leak detector;
* ``head_labels`` — the Heads page's head types (label, score, first-token mass beside it; no type for heads that
  see the future);
* ``induction`` — the Induction lab's cached run and its widgets;
* ``generate`` — the Generate page: the cached generation, its stepper, what a KV cache costs;
* ``benchmark`` — the Benchmark page: the implementations timed on Run, with Stop, the last results kept;
* ``train``    — the Train page: the background training job, its live view, the trained model as weights.
"""

# pandas before any module that builds a figure: Plotly looks pandas up in sys.modules, where a module another
# session's thread is still importing sits half-initialised; a session that has imported this package finds it whole
# (tests/browser/test_concurrency.py: several fresh sessions at once).
import pandas  # noqa: F401, I001

from attnviz.ui.checkpoint import next_token_panel
from attnviz.ui.frame import (
    app_frame,
    book_listing_note,
    page_setup,
    plotly_config,
    setup,
    weights_caption,
)
from attnviz.ui.layer_views import draw_layer_views
from attnviz.ui.navigation import navigate, pages
from attnviz.ui.share import share_link
from attnviz.urlstate import DEFAULTS, config_from_settings, settings_from_query
from attnviz.words import markdown_escape

__all__ = [  # what app.py, the pages and the tests call as ui.<name>; the modules above hold the rest
    "DEFAULTS", "app_frame", "book_listing_note", "config_from_settings", "draw_layer_views", "markdown_escape",
    "navigate", "next_token_panel", "page_setup", "pages", "plotly_config", "settings_from_query", "setup",
    "share_link", "weights_caption",
]
