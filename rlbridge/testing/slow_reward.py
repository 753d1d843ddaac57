"""A reward function for the compliance suite that only takes time: the kill-and-resume test adds it
with weight 0 so that every step lasts at least `seconds`, which keeps a step from finishing between
the moment the test sees the previous step's row and the moment it kills the run (TRL's CPU steps are
shorter than the time metrics take to reach metrics.jsonl). Written in TRL's calling convention, so it
runs on every backend as a `native: trl` reward."""

import time


def pause(prompts, completions, seconds: float = 1.0, **kwargs):
    """Sleep once per call, score every completion 0."""
    time.sleep(seconds)
    return [0.0] * len(completions)
