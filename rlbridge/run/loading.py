"""Load a RunConfig from YAML plus `--set a.b=c` overrides, with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlbridge.contract.config import RunConfig
from rlbridge.contract.local_plugins import resolve_config_refs
from rlbridge.errors import ConfigError, did_you_mean


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read the YAML file (or start from defaults when path is None), apply overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        data = parse_yaml(path.read_text(), str(path))
    for item in overrides:
        apply_override(data, item)
    config = validate_config(data)
    for i, spec in enumerate(config.reward):
        if spec.native is not None:  # a backend that declares a reward convention (from the registry: only then)
            from rlbridge.contract.native_rewards import convention

            convention(spec.native, f"reward.{i}")
    resolve_config_refs(config, Path(path).parent if path is not None else None)
    if config.run_name is None and path is not None:
        config.run_name = Path(path).stem
    return config


def parse_yaml(text: str, source: str = "<config>") -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"YAML syntax error at {where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys (backend: ..., model: ...)")
    return data


def apply_override(data: dict[str, Any], item: str) -> None:
    """Apply one 'a.b.c=value' override in place; the value is parsed as YAML (so 3, true, [1,2] work)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' must look like key.path=value (e.g. training.steps=10)")
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{item}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{item}': the value is not valid YAML ({exc})") from exc
    parts = key.split(".")
    _check_override_path(parts, item)
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override '{item}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def _check_override_path(parts: list[str], item: str) -> None:
    """Catch typos in override keys early, with a did-you-mean (free-form dicts are not checked)."""
    model: type[BaseModel] | None = RunConfig
    for i, part in enumerate(parts):
        if model is None:
            return
        fields = model.model_fields
        if part not in fields:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"override '{item}': unknown key '{part}' in {where}{did_you_mean(part, fields)}")
        model = _submodel(fields[part].annotation)


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def validate_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from exc


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        if err["type"] == "extra_forbidden":
            field = str(err["loc"][-1])
            parent = _model_at(err["loc"][:-1])
            hint = did_you_mean(field, parent.model_fields) if parent else ""
            where = ".".join(str(p) for p in err["loc"][:-1]) or "the top level"
            lines.append(f"unknown key '{field}' in {where}{hint}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
            lines.append(f"{loc or 'config'}: {msg}{shown}" if loc else msg)
    return "invalid config:\n  " + "\n  ".join(lines) if len(lines) > 1 else f"invalid config: {lines[0]}"


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the union member name (e.g. 'int', "literal['auto']") into error locations
    return isinstance(part, str) and (
        part in {"int", "str", "bool", "float"} or part.startswith(("literal[", "function-"))
    )


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] | None = RunConfig
    for part in loc:
        if model is None or isinstance(part, int):
            if isinstance(part, int):
                continue
            return None
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        model = _submodel(field.annotation)
    return model


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
