"""The events file engine processes (driver, Ray workers, vLLM) append to, and the environment
variables that tell them where it is and which reward plugins the run uses. A leaf of the engine
layer: every engine-side module may import it."""

from __future__ import annotations

import json
import os

EVENTS_ENV = "RLBRIDGE_EVENTS"
REWARDS_ENV = "RLBRIDGE_REWARDS"


def write_event(event: dict) -> None:
    """Append one event line to the run's events file (a no-op outside an rlbridge run)."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:  # one short append per line: safe across processes
        fh.write(json.dumps(event) + "\n")
