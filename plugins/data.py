"""Built-in data-source plugins for `data.*.type: generator`."""

from __future__ import annotations

import json
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


def reasoning_gym(dataset: str = "basic_arithmetic", num_rows: int = 256, seed: int = 0, **config) -> list[dict]:
    """Procedural tasks from reasoning-gym (pip install reasoning-gym); score them with the
    `reasoning_gym` reward, which calls reasoning-gym's own scorer."""
    try:
        import reasoning_gym as rg
    except ImportError as exc:
        from rlbridge.errors import ConfigError

        raise ConfigError("data source 'reasoning_gym' needs the reasoning-gym package: pip install reasoning-gym") from exc
    data = rg.create_dataset(dataset, size=num_rows, seed=seed, **config)
    rows = []
    for entry in data:
        rows.append(
            {
                "prompt": entry["question"],
                "answer": entry["answer"],
                "rg_dataset": dataset,
                # kept as JSON so engines that store rows in Arrow/Parquet carry it unchanged
                "rg_entry": json.dumps(entry, default=str),
            }
        )
    return rows


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin("digit_copy", digit_copy, "prompt 'dddd', answer 'd' (the quickstart task)"),
        DataSourcePlugin("reasoning_gym", reasoning_gym, "reasoning-gym procedural datasets (needs reasoning-gym)"),
    ]
