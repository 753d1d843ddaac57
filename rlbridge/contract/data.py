"""Loading training and evaluation rows from the canonical data sources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlbridge.contract.config import DataSource, RunConfig
from rlbridge.errors import ConfigError


def check_source(source: DataSource, field_name: str, plugins) -> None:
    """Pre-flight check: the file exists or the generator plugin is registered."""
    if source.type == "generator":
        plugins.get("data_source", source.name, f"{field_name}.name")
    elif not Path(source.path).expanduser().exists():
        raise ConfigError(f"{field_name}.path: '{source.path}' does not exist; point it at your {source.type} data")


def load_rows(source: DataSource, config: RunConfig, field_name: str, plugins=None) -> list[dict[str, Any]]:
    from rlbridge.contract.registry import get_plugin_manager

    pm = plugins or get_plugin_manager()
    if source.type == "generator":
        plugin = pm.get("data_source", source.name, f"{field_name}.name")
        rows = list(plugin.generate(**{"seed": config.training.seed, **source.args}))
    elif source.type == "jsonl":
        rows = []
        with open(Path(source.path).expanduser(), encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"{field_name}.path: {source.path}:{lineno} is not valid JSON: {exc}") from exc
    elif source.type == "parquet":
        import pyarrow.parquet as pq  # comes with the engine extras

        rows = pq.read_table(Path(source.path).expanduser()).to_pylist()
    else:  # hf_disk
        import datasets

        ds = datasets.load_from_disk(str(Path(source.path).expanduser()))
        if isinstance(ds, datasets.DatasetDict):
            split = source.split or "train"
            if split not in ds:
                raise ConfigError(f"{field_name}.split: '{split}' not in the saved dataset; it has {sorted(ds)}")
            ds = ds[split]
        rows = ds.to_list()
    if source.limit is not None:
        rows = rows[: source.limit]
    _check_rows(rows, config, field_name)
    return rows


def _check_rows(rows: list[dict[str, Any]], config: RunConfig, field_name: str) -> None:
    if not rows:
        raise ConfigError(f"{field_name}: the data source produced no rows")
    if config.data.prompt_key not in rows[0]:
        raise ConfigError(
            f"data.prompt_key: rows of {field_name} have no column '{config.data.prompt_key}'; they have {sorted(rows[0])}"
        )
