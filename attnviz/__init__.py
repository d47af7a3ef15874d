"""attnviz — see how GPT-style attention works (Raschka, *Build a LLM From Scratch*, Ch. 3).

Data flows one way: text → ``tokens`` → ``embedding`` → ``attention`` → ``pipeline.run()`` →
``Trace`` → ``figures``/``diagram`` → Streamlit pages (glue in the ``attnviz.ui`` package, the only
place here that imports Streamlit).  Every variant and size preset is one record in ``variants``.

Importing this package imports nothing else: ``attnviz.ui`` imports pandas before any figure can be built
(its docstring says why).
"""
