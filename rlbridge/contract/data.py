"""Loading training and evaluation rows from the canonical data sources."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbridge.contract.config import DataSource, RunConfig
from rlbridge.contract.models import exists
from rlbridge.errors import ConfigError

DATA_DIGEST_ENV = "RLBRIDGE_DATA_DIGEST_DIR"
"""Directory where load_rows writes `<field>.json`, the hash of the rows it loaded, for the run's
manifest.json (set by the runner; rlbridge.run.manifest merges it at the end of the run)."""


def check_source(source: DataSource, field_name: str, plugins) -> None:
    """Pre-flight check: the file exists, the generator plugin is registered, or the hub dataset is
    a local directory that exists, or (in offline mode) one the Hugging Face cache holds."""
    if source.type == "generator":
        plugins.get("data_source", source.name, f"{field_name}.name")
    elif source.type == "hf":
        _check_local(source, field_name)
        if _hf_local(source.name, field_name) or hf_offline():  # a hub id online: nothing to check without the network
            _check_builder(source, field_name)
    else:
        for path in paths(source):
            if not exists(path, f"{field_name}.path"):
                raise ConfigError(f"{field_name}.path: '{path}' does not exist; point it at your {source.type} data")


def paths(source: DataSource) -> list[str]:
    """The files (or the directory) a jsonl, parquet or hf_disk source reads, in order."""
    return list(source.path) if isinstance(source.path, list) else [source.path]


def hf_offline() -> bool:
    """Whether the Hugging Face libraries are in offline mode (read as huggingface_hub reads it)."""
    return any(
        os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _hf_local(name: str, field_name: str) -> bool:
    """A local dataset directory rather than a hub id ('gsm8k' may be either): load_dataset's own rule is 'an
    existing path is local'; a name that looks like a path but is missing is a local one mistyped."""
    return name.startswith(("/", ".", "~")) or exists(name, f"{field_name}.name")


def _check_local(source: DataSource, field_name: str) -> None:
    if _hf_local(source.name, field_name) and not exists(source.name, f"{field_name}.name"):
        raise ConfigError(
            f"{field_name}.name: '{source.name}' does not exist; give a hub dataset id (org/name) or an "
            "existing local dataset directory"
        )


def _check_builder(source: DataSource, field_name: str) -> None:
    """A local dataset, or a hub one in offline mode: its builder resolves (from the cache, for a hub id)
    with the config asked for, or one line says why not. Only where this process has datasets (an engine
    environment's does; where it lacks it, the engine's load says the same)."""
    try:
        import datasets  # noqa: F401 - only whether it is here
    except ImportError:
        return
    try:
        with _quiet_datasets() as datasets:
            datasets.load_dataset_builder(source.name, source.config, revision=source.revision)
    except Exception as exc:  # noqa: BLE001 - every failure to resolve is the user's to fix, in one line
        raise _hf_error(exc, source, field_name) from exc


def _hf_cache() -> str:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE

        return HF_HUB_CACHE
    except ImportError:
        return "HF_HOME"


def _hf_error(exc: Exception, source: DataSource, field_name: str) -> ConfigError:
    """One line for a hub dataset that did not load: offline and not cached, unknown, a wrong config or split."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    what = f"'{source.name}'" + (f" (config '{source.config}')" if source.config else "")
    if hf_offline() and (isinstance(exc, OSError) or "couldn't find cache" in first.lower()):
        from_env = ", ".join(
            f"{n}={os.environ[n]}" for n in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if n in os.environ
        )
        field = "config" if source.config and isinstance(exc, ValueError) else "name"
        return ConfigError(
            f"{field_name}.{field}: {what} is not in the Hugging Face cache ({_hf_cache()}) and offline mode is on "
            f"({from_env}): load it once with network access and the same HF_HOME / HF_DATASETS_CACHE, or unset "
            "the offline variables"
        )
    if "unknown split" in first.lower():
        return ConfigError(f"{field_name}.split: {first}")
    if "config" in first.lower() and ("missing" in first.lower() or "not found" in first.lower()):
        return ConfigError(f"{field_name}.config: {what}: {first}")
    return ConfigError(f"{field_name}.name: {what} did not load: {type(exc).__name__}: {first}")


@contextmanager
def _quiet_datasets():
    """datasets' own log lines (which cached copy it uses, offline) stay out of rlbridge's output."""
    import datasets

    before = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()
    try:
        yield datasets
    finally:
        datasets.logging.set_verbosity(before)


def load_rows(source: DataSource, config: RunConfig, field_name: str, plugins=None) -> list[dict[str, Any]]:
    from rlbridge.contract.registry import get_plugin_manager

    pm = plugins or get_plugin_manager()
    if source.type == "generator":
        plugin = pm.get("data_source", source.name, f"{field_name}.name")
        rows = list(plugin.generate(**{"seed": config.training.seed, **source.args}))
    elif source.type == "jsonl":
        rows = []
        for path in paths(source):
            with open(Path(path).expanduser(), encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise ConfigError(f"{field_name}.path: {path}:{lineno} is not valid JSON: {exc}") from exc
    elif source.type == "parquet":
        import pyarrow.parquet as pq  # comes with the engine extras

        rows = [row for path in paths(source) for row in pq.read_table(Path(path).expanduser()).to_pylist()]
    elif source.type == "hf":
        _check_local(source, field_name)
        try:
            with _quiet_datasets() as datasets:
                ds = datasets.load_dataset(
                    source.name, source.config, split=source.split or "train", revision=source.revision
                )
        except Exception as exc:  # noqa: BLE001 - every failure to load is the user's to fix, in one line
            raise _hf_error(exc, source, field_name) from exc
        rows = (ds.select(range(min(source.limit, len(ds)))) if source.limit else ds).to_list()
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
