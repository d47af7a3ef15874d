"""attnviz — see how GPT-style attention works (Raschka, *Build a LLM From Scratch*, Ch. 3).

Data flows one way: text → ``tokens`` → ``embedding`` → ``attention`` → ``pipeline.run()`` →
``Trace`` → ``figures``/``diagram`` → Streamlit pages (glue in ``attnviz.ui``, the only module
here that imports Streamlit).
"""
