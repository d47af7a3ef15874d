"""attnviz — `streamlit run app.py`.  The Heads view is what `/` shows (same script as /heads)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).parent / "pages" / "heads.py"), run_name="__main__")
