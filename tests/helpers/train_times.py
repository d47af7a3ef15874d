"""The step times of a Train run as a teacher saw one, for the time-left tests."""

import numpy as np


def teacher_run(done: int, total: int = 1000) -> tuple[list[int], list[float], float]:
    """The steps and their end times of a Train run as a teacher saw it: the first step holds ~13 s of warm-up
    (imports, the first probe), then ~0.3 s a step and a probe every 50 steps (~0.5 s more). Returns the steps done,
    the seconds at the end of each, and the true time the rest takes."""
    durations = [13.0] + [0.3 + (0.5 if step % 50 == 0 or step == total - 1 else 0.0) for step in range(1, total)]
    ends = list(np.cumsum(durations))
    return list(range(done)), ends[:done], ends[-1] - ends[done - 1]
