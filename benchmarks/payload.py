"""What each page sends to the browser at n = 1024 tokens, measured without a browser (AppTest).

    python benchmarks/payload.py                 # every page, GPT-2 small, causal, 1024 tokens
    python benchmarks/payload.py --tokens 256 --pages / steps

Each page is run in ``streamlit.testing.v1.AppTest`` with ``?text=<n tokens>`` and the element
tree it produced is walked.  Per page:

* ``plotly``: number of Plotly charts and the sum of ``len(proto.spec)`` (the figure JSON; NumPy
  arrays travel inside it as base64 ``bdata``);
* ``dataframe``: number of ``st.dataframe`` tables (the head statistics and types) and their protos'
  ``ByteSize()`` (the table as Arrow bytes and its column config);
* ``graphviz``: the sum of ``len(proto.spec)`` of Graphviz charts (DOT source);
* ``other``: ``ByteSize()`` of every other element proto (widgets, markdown, …);
* ``total``: ``ByteSize()`` of every element proto — close to the websocket payload of one full
  rerun (the ForwardMsg envelopes and deltas add a little; see benchmarks/browser.py for the real one).

Pages share one AppTest process, so the pipeline cache is warm after the first page; ``script s``
is the AppTest run time of the page (the first page includes the pipeline run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from attnviz import tokens  # noqa: E402

PAGES = {
    "/": None,  # app.py: the Heads view
    "steps": "pages/steps.py",
    "shapes": "pages/shapes.py",
    "tokens": "pages/tokens.py",
    "compare": "pages/compare.py",
    "pitfalls": "pages/pitfalls.py",
    "benchmark": "pages/benchmark.py",
}
PASSAGE = (
    "Attention lets every token look at the tokens before it and decide how much of each to use. "
    "A query asks a question, a key says what a token offers, and a value is what it hands over. "
    "The scores are dot products of queries and keys, scaled by the square root of the head size, "
    "masked so that no token sees the future, and turned into weights by a softmax. "
    "Each head learns its own projections, so one head may follow syntax while another tracks names. "
    "In chapter {i} of our story the traveller counted {j} steps, wrote {k} lines in a notebook, "
    "and wondered whether the river at mile {m} had always run this way. "
)


def text_of_tokens(n: int, variant: int = 0) -> str:
    """A readable English text of exactly ``n`` GPT-2 tokens (deterministic; ``variant`` gives another)."""
    parts, i = [], 0
    while len(tokens.encode("".join(parts))) < n + 16:
        v = i + 1000 * variant
        parts.append(PASSAGE.format(i=v + 1, j=17 * v + 3, k=5 * v + 2, m=31 * v + 7))
        i += 1
    ids = tokens.encode("".join(parts))
    for cut in range(n, n - 16, -1):  # a cut inside a word may re-tokenize differently: back off a little
        text = tokens.decode(ids[:cut]).rstrip()
        if len(tokens.encode(text)) == n:
            return text
    extra = " the"
    text = tokens.decode(ids[: n - 8]).rstrip()
    while len(tokens.encode(text)) < n:
        text += extra
    assert len(tokens.encode(text)) == n
    return text


def element_sizes(at) -> dict:
    """Walk an AppTest tree: the Plotly charts' bytes (``st.plotly_chart``'s figure JSON), the ``st.dataframe``s'
    bytes (Arrow), Graphviz spec bytes, other proto bytes, total."""
    sizes = {"plotly_charts": 0, "plotly_bytes": 0, "dataframes": 0, "dataframe_bytes": 0, "graphviz_bytes": 0,
             "other_bytes": 0, "total_bytes": 0, "plotly_specs": []}

    def walk(node):
        proto = getattr(node, "proto", None)
        kind = getattr(node, "type", None)
        if proto is not None and hasattr(proto, "ByteSize") and kind not in ("main", "sidebar", "event", "root"):
            size = proto.ByteSize()
            if kind == "plotly_chart":
                sizes["plotly_charts"] += 1
                sizes["plotly_bytes"] += len(proto.spec)
                sizes["plotly_specs"].append(proto.spec)
            elif kind == "dataframe":  # st.dataframe: the table as Arrow IPC bytes, plus its column config
                sizes["dataframes"] += 1
                sizes["dataframe_bytes"] += size
            elif kind == "graphviz_chart":
                sizes["graphviz_bytes"] += len(proto.spec)
            elif not getattr(node, "children", None):
                sizes["other_bytes"] += size
            if not getattr(node, "children", None):
                sizes["total_bytes"] += size
        children = getattr(node, "children", None) or {}
        for child in children.values() if isinstance(children, dict) else children:
            walk(child)

    walk(at._tree)
    return sizes


def measure(page: str | None, text: str, timeout: float = 300, **query) -> tuple[dict, float]:
    """(sizes, seconds) of one page run in AppTest with ``?text=…`` (+ other URL parameters)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    at.query_params["text"] = text
    for key, value in query.items():
        at.query_params[key] = value
    start = time.perf_counter()
    at.run()
    if page is not None:
        at.switch_page(page).run()
    seconds = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(f"{page}: {[e.value for e in at.exception]}")
    return element_sizes(at), seconds


def kib(value: int) -> str:
    return f"{value / 1024:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES))
    args = parser.parse_args(argv)
    import streamlit

    text = text_of_tokens(args.tokens)
    print(f"GPT-2 small (768, 12 heads), causal, n = {args.tokens} tokens; streamlit {streamlit.__version__}\n")
    print("| page | plotly charts | plotly KiB | dataframes | dataframe KiB | graphviz KiB | other KiB | total KiB "
          "| script s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.pages:
        sizes, seconds = measure(PAGES[name], text)
        print(f"| {name} | {sizes['plotly_charts']} | {kib(sizes['plotly_bytes'])} | {sizes['dataframes']} "
              f"| {kib(sizes['dataframe_bytes'])} | {kib(sizes['graphviz_bytes'])} "
              f"| {kib(sizes['other_bytes'])} | {kib(sizes['total_bytes'])} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
