"""Loading training and evaluation rows from the canonical data sources."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from rlbridge.contract.config import DataSource, RunConfig
from rlbridge.errors import ConfigError

DATA_DIGEST_ENV = "RLBRIDGE_DATA_DIGEST_DIR"
"""Directory where load_rows writes `<field>.json`, the hash of the rows it loaded, for the run's
manifest.json (set by the runner; rlbridge.run.manifest merges it at the end of the run)."""


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
                        raise ConfigError(
                            f"{field_name}.path: {source.path}:{lineno} is not valid JSON: {exc}"
                        ) from exc
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
    record_rows(field_name, rows)  # their hash, for the run's manifest.json
    return rows


def _check_rows(rows: list[dict[str, Any]], config: RunConfig, field_name: str) -> None:
    if not rows:
        raise ConfigError(f"{field_name}: the data source produced no rows")
    if config.is_offline:  # sft / dpo / reward_model rows (rlbridge.contract.stages)
        from rlbridge.contract.stages import row_format

        row_format(rows, config, field_name)
        return
    if config.data.prompt_key not in rows[0]:
        raise ConfigError(
            f"data.prompt_key: rows of {field_name} have no column '{config.data.prompt_key}'; they have "
            f"{sorted(rows[0])}"
        )


def rows_digest(rows: list[dict[str, Any]]) -> str:
    """Hash of data rows in order (canonical JSON per row), so that order matters as for training."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, default=str, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def record_rows(field: str, rows: list[dict[str, Any]]) -> None:
    """Called by load_rows: the hash of the rows just loaded, for the manifest of the running job."""
    directory = os.environ.get(DATA_DIGEST_ENV)
    if not directory:
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        out = Path(directory) / f"{field}.json"
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"field": field, "rows": len(rows), "rows_sha256": rows_digest(rows)}))
        tmp.replace(out)
    except OSError:  # the manifest never fails a run
        pass
