"""A new 1,024-token text / the bare forward, this checkout (after) against another checkout's app (before),
alternating in the same minutes: ``python benchmarks/cold_ab.py BEFORE_DIR [ROUNDS] [TEXTS]`` (BEFORE_DIR: a
``git archive`` export of the other commit).  Each app is timed by ``browser.py --cold TEXTS --warm 0 --changes 0
--first-paint 0 --skip-naive --app-root DIR``; the rounds and medians go to ``results/browser_cold_ab.json``."""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    before, rounds, texts = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, int(
        sys.argv[3]) if len(sys.argv) > 3 else 3
    apps = {"after": str(HERE.parent), "before": before}
    samples, machine = [], None
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(1, rounds + 1):
            for app in ("after", "before") if round_ % 2 else ("before", "after"):  # each first in turn
                out = Path(folder) / f"{app}_{round_}.json"
                subprocess.run([sys.executable, str(HERE / "browser.py"), "--cold", str(texts), "--warm", "0",
                                "--changes", "0", "--first-paint", "0", "--skip-naive", "--app-root", apps[app],
                                "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
                result = json.loads(out.read_text())
                machine = machine or result["machine"]
                cold = result["samples"]["attnviz"]["cold"]
                samples.append({"app": app, "round": round_, "cold": cold})
                print(app, round_, [f"{c['ms'] / c['bare_forward_ms']:.1f}×" for c in cold], flush=True)
    summary = {"what": f"a new 1,024-token text / the bare forward, this checkout (after) and {before} (before) "
                       f"alternating, {rounds} rounds of {texts} texts each", "rounds": samples, "machine": machine}
    for app in apps:
        cold = [c for s in samples if s["app"] == app for c in s["cold"]]
        summary[f"{app}_median_ratio"] = round(statistics.median(c["ms"] / c["bare_forward_ms"] for c in cold), 2)
        summary[f"{app}_median_ms"] = round(statistics.median(c["ms"] for c in cold))
    (HERE / "results" / "browser_cold_ab.json").write_text(json.dumps(summary, indent=1))
    print({key: value for key, value in summary.items() if key.endswith(("ratio", "ms"))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
