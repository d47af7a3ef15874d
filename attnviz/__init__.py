"""attnviz — see how GPT-style attention works (Raschka, *Build a LLM From Scratch*, Ch. 3).

Data flows one way: text → ``tokens`` → ``embedding`` → ``attention`` → ``pipeline.run()`` →
``Trace`` → ``figures``/``diagram`` → Streamlit pages (glue in the ``attnviz.ui`` package, the only
place here that imports Streamlit).  Every variant and size preset is one record in ``variants``.
"""

# Import pandas here, once, before any figure is built.  Plotly looks pandas up in sys.modules, where a
# module that another thread is still importing already sits half-initialised; with several Streamlit
# sessions starting together, a lazy first `import pandas` in one session made Plotly crash in the others
# ("partially initialized module 'pandas' has no attribute 'Series'").  Every page imports attnviz first,
# and Python's import lock holds other threads until this package (and so pandas) is fully imported.
import pandas  # noqa: E402, F401
