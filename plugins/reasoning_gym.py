"""reasoning-gym (https://github.com/open-thought/reasoning-gym) as rlbridge plugins: an optional
extra (`pip install 'rlbridge[reasoning-gym]'`), registered through the `rlbridge` entry-point group
exactly as a third-party package would be. reasoning-gym is imported only when used.

- data source `reasoning_gym`: any of its datasets by name, with the dataset's own config
  (`args: {dataset: NAME, num_rows: N, seed: S, <config keys>...}`, e.g. `dataset: chain_sum,
  min_terms: 2`), or a weighted mix (`dataset: [NAME, ...]`). Each row carries the full entry
  reasoning-gym's scorer needs (`rg_entry`, as JSON so that engines storing rows in Arrow/Parquet
  keep it unchanged) and its dataset's name (`rg_dataset`).
- reward `reasoning_gym`: reasoning-gym's own `score_answer` for the row's dataset, on the
  completion (or on its `<answer>...</answer>` span with `extract: true`, reasoning-gym's
  `extract_answer`). Rows without an entry score None (not applicable).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rlbridge import hookimpl
from rlbridge.contract.registry import DataSourcePlugin, RewardPlugin
from rlbridge.errors import ConfigError


def _rg():
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ConfigError(
            "reasoning_gym plugins need the reasoning-gym package: pip install 'rlbridge[reasoning-gym]'"
        ) from exc
    return reasoning_gym


def reasoning_gym_rows(
    dataset: str | list[str] = "basic_arithmetic", num_rows: int = 256, seed: int = 0, **config
) -> list[dict]:
    """Rows from reasoning-gym's generator (seeded): prompt = question, answer, and the entry."""
    rg = _rg()
    names = [dataset] if isinstance(dataset, str) else list(dataset)
    try:
        if len(names) == 1:
            data = rg.create_dataset(names[0], size=num_rows, seed=seed, **config)
        else:
            from reasoning_gym.composite import DatasetSpec

            specs = [DatasetSpec(name=n, weight=1.0, config=dict(config.get(n, {}))) for n in names]
            data = rg.create_dataset("composite", size=num_rows, seed=seed, datasets=specs)
    except (KeyError, ValueError, TypeError, AssertionError) as exc:
        raise ConfigError(
            f"data.train.args: reasoning-gym refused dataset {dataset!r} with config {config}: {exc}"
        ) from exc
    rows = []
    for entry in data:
        name = (entry.get("metadata") or {}).get("source_dataset", names[0])
        rows.append(
            {
                "prompt": entry["question"],
                "answer": str(entry["answer"]),
                "rg_dataset": name,
                "rg_entry": json.dumps(entry, default=str),
            }
        )
    return rows


def reasoning_gym_reward(dataset: str | None = None, extract: bool = False):
    """reasoning-gym's own scorer for each row's dataset (rows of the reasoning_gym data source)."""

    def reward(inputs: Sequence) -> list[float | None]:
        rg = _rg()
        out: list[float | None] = []
        for x in inputs:
            entry = x.metadata.get("rg_entry")
            entry = json.loads(entry) if isinstance(entry, str) else entry
            name = dataset or x.metadata.get("rg_dataset")
            if entry is None or name is None:
                out.append(None)
                continue
            answer = x.completion
            if extract:
                from reasoning_gym.utils import extract_answer

                answer = extract_answer(answer) or ""
            out.append(float(rg.get_score_answer_fn(name)(answer, entry)))
        return out

    return reward


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin(
            "reasoning_gym", reasoning_gym_rows, "reasoning-gym datasets by name and config (extra: reasoning-gym)"
        )
    ]


@hookimpl
def rlbridge_register_rewards():
    return [
        RewardPlugin(
            "reasoning_gym",
            reasoning_gym_reward,
            "reasoning-gym's own score_answer for the row's dataset (extra: reasoning-gym)",
        )
    ]
