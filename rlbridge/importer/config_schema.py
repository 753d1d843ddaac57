"""The canonical config's schema as the import's solver (rlbridge.importer.solver) searches it: every scalar
knob as a dotted path with its options, kinds and default, and reading/writing a config's values by path."""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from rlbridge.contract.config import RunConfig

# Canonical fields the solver does not search: the core's own (the runner fills them), and the
# plugin lists, which a recipe's reward code cannot be translated into (the report says so).
_NOT_SEARCHED = {
    "backend",
    "output_dir",
    "engine_env",
    "engine_version",
    "telemetry",
    "backend_options",
    "reward",
    "environment",
    "placement.args",
    "data.train.args",
    "data.eval.args",
}


@dataclass
class Leaf:
    path: str
    options: list[Any] | None  # every value of a Literal/bool knob
    kinds: set[type]
    nullable: bool
    default: Any
    source: bool = False  # a DataSource (data.train / data.eval)


def leaves(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[Leaf]:
    """Every scalar knob of the config schema, as dotted paths (nested sections walked)."""
    from rlbridge.contract.config import DataSource

    out: list[Leaf] = []
    for name, info in model.model_fields.items():
        path = prefix + name
        if path in _NOT_SEARCHED:
            continue
        default = info.get_default(call_default_factory=True)
        args = _union_args(info.annotation)
        nullable = type(None) in args
        args = [a for a in args if a is not type(None)]
        sub = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is DataSource:
            out.append(Leaf(path, None, {str}, nullable, _dump(default), source=True))
            continue
        if sub is not None:
            if nullable:
                out.append(Leaf(path, [None], set(), True, None))
            out += leaves(sub, path + ".")
            continue
        options: list[Any] = []
        kinds: set[type] = set()
        for a in args:
            if typing.get_origin(a) is Literal:
                options += list(typing.get_args(a))
            elif a is bool:
                options += [True, False]
            elif a in (int, float, str):
                kinds.add(a)
        if not options and not kinds:
            continue  # dicts, lists: not searched
        if kinds and options and path == "resources.gpus_per_node":
            options = []  # 'auto' is resolved before planning
        out.append(Leaf(path, options or None, kinds, nullable, _dump(default)))
    return out


def _union_args(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _union_args(typing.get_args(annotation)[0])
    if origin is typing.Union or str(origin) == "types.UnionType" or type(annotation).__name__ == "UnionType":
        out = []
        for a in typing.get_args(annotation):
            out += _union_args(a)
        return out
    return [annotation]


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def get_path(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    return out


_MISSING = object()


def data_source(path: str | list[str]) -> dict[str, Any]:
    """A canonical data source for a file path a recipe names (several files: a jsonl or parquet source of all)."""
    kinds = {
        {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(Path(p).suffix.lower(), "hf_disk")
        for p in (path if isinstance(path, list) else [path])
    }
    kind = kinds.pop() if len(kinds) == 1 else "hf_disk"  # mixed kinds: no one source reads them (refused)
    return {"type": kind, "path": path}


def _value_at(config: RunConfig, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


def _default_at(path: str) -> Any:
    model: Any = RunConfig
    parts = path.split(".")
    for part in parts[:-1]:
        args = [
            a
            for a in _union_args(model.model_fields[part].annotation)
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not args:
            return None
        model = args[0]
    return _dump(model.model_fields[parts[-1]].get_default(call_default_factory=True))
