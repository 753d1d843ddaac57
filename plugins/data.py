"""Built-in data-source plugins for `data.*.type: generator`."""

from __future__ import annotations

import random

from rlbridge import hookimpl
from rlbridge.contract.registry import DataSourcePlugin


def digit_copy(num_rows: int = 1024, repeat: int = 4, seed: int = 0) -> list[dict]:
    """The quickstart task: the prompt is one digit repeated `repeat` times, the answer is that
    digit. Rewarded with digit_match, a policy must learn to keep writing the prompt's digit."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        digit = str(rng.randrange(10))
        rows.append({"prompt": digit * repeat, "answer": digit})
    return rows


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin("digit_copy", digit_copy, "prompt 'dddd', answer 'd' (the quickstart task)"),
    ]
