"""Where the policy model comes from: a path, a hub id, or a builtin model that a model-builder
plugin makes on first use (`model.path: builtin:NAME`)."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

from rlbridge.contract.config import RunConfig
from rlbridge.contract.registry import PluginManager, get_plugin_manager
from rlbridge.errors import ConfigError, did_you_mean
from rlbridge.machine import cache_dir

BUILTIN_PREFIX = "builtin:"


def builtin_model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def model_path(config: RunConfig) -> str:
    """The directory or hub id the engine loads the policy from."""
    return resolve_path(config.model.path)


def resolve_path(path: str) -> str:
    """The directory or hub id an engine loads a model given as `path` from (the policy, the critic
    or a reward model: each may be a directory, a hub id or 'builtin:NAME')."""
    if path.startswith(BUILTIN_PREFIX):
        return str(builtin_model_dir(path[len(BUILTIN_PREFIX) :]))
    return str(Path(path).expanduser()) if looks_local(path) else path


def looks_local(path: str) -> bool:
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        return True
    try:
        return Path(path).expanduser().exists()
    except OSError:  # a name the file system cannot even look up (over 255 bytes): a local path, mistyped
        return True


def exists(path: str, field: str) -> bool:
    """Whether the local path `path` exists; one the file system cannot look up (a name over its 255 bytes,
    a path over 4096) is a ConfigError naming `field`, not an OSError."""
    try:
        return Path(path).expanduser().exists()
    except OSError as exc:
        shown = path if len(path) <= 80 else f"{path[:60]}...{path[-12:]}"
        raise ConfigError(
            f"{field}: '{shown}' ({len(path)} characters) is not a path this file system can look up "
            f"({exc.strerror}); point it at an existing directory"
        ) from exc


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = "tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt or *.tiktoken"


def _quietly(build, target: Path) -> str:
    """A model builder's own output (save_pretrained's progress bars) is not shown, unless the build fails:
    building a builtin model on first use is rlbridge's doing, not a line for the user."""
    import contextlib
    import io
    import sys

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return build(target)
    except BaseException:
        sys.stderr.write(said.getvalue())
        raise


def check_model_dir(path: str, field: str, tokenizer: bool, transformers_dir: Path | None = None) -> None:
    """A local model directory an engine will load, checked without loading it: config.json readable,
    naming an architecture the engine's transformers knows (its CONFIG_MAPPING names, read from
    `transformers_dir` without importing it; unchecked when None), weights present (a single file, or a
    sharded index whose shards all exist) and, with `tokenizer`, tokenizer files. One ConfigError naming
    `field` and what is missing."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigError(
            f"{field}: '{path}' is a file, not a model directory; point it at the directory that holds "
            "config.json, the weights and the tokenizer (what save_pretrained writes)"
        )
    if not (directory / "config.json").is_file():
        inside = sorted(p.name for p in directory.iterdir())
        raise ConfigError(
            f"{field}: '{path}' has no config.json, so it is not a model directory ("
            + (f"it holds {', '.join(inside[:6])}{', ...' if len(inside) > 6 else ''}" if inside else "it is empty")
            + "); point it at the directory save_pretrained wrote"
        )
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{field}: {directory / 'config.json'} is not readable JSON ({exc})") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{field}: {directory / 'config.json'} names no model_type, so no engine can load it")
    known = known_model_types(transformers_dir) if transformers_dir is not None else None
    if known is not None and model_type not in known and "auto_map" not in config:  # auto_map: the model's own code
        raise ConfigError(
            f"{field}: {directory / 'config.json'} has model_type '{model_type}', which transformers "
            f"{_version(transformers_dir)} (the engine's, {transformers_dir}) does not know"
            + did_you_mean(model_type, known)
        )
    _check_weights(directory, field)
    if tokenizer and not _has_tokenizer(directory):
        raise ConfigError(
            f"{field}: '{path}' has no tokenizer files ({TOKENIZER_FILES}), so its tokenizer cannot load; "
            "save the tokenizer there too (tokenizer.save_pretrained)"
        )


def _check_weights(directory: Path, field: str) -> None:
    if any((directory / name).is_file() for name in WEIGHT_FILES):
        return
    for index in SHARD_INDEXES:
        if (directory / index).is_file():
            try:
                shards = set(json.loads((directory / index).read_text(encoding="utf-8"))["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ConfigError(f"{field}: {directory / index} is not a readable shard index ({exc})") from exc
            missing = sorted(name for name in shards if not (directory / name).is_file())
            if missing:
                raise ConfigError(
                    f"{field}: {directory / index} names {len(missing)} shard(s) that are not there: "
                    f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}"
                )
            return
    raise ConfigError(
        f"{field}: '{directory}' has config.json but no weights ({', '.join(WEIGHT_FILES)}, or a sharded "
        f"{' / '.join(SHARD_INDEXES)}); point it at a directory save_pretrained wrote the model to"
    )


def _has_tokenizer(directory: Path) -> bool:
    names = {p.name for p in directory.iterdir()}
    return bool(
        "tokenizer.json" in names
        or "vocab.txt" in names
        or {"vocab.json", "merges.txt"} <= names
        or any(name.endswith((".model", ".tiktoken")) for name in names)  # sentencepiece, tiktoken
    )


def transformers_in(site_packages_of: Path | None) -> Path | None:
    """The transformers package directory an engine imports: in the environment of the Python
    `site_packages_of` (an engine environment's bin/python), or this process's (None); None where there is none.
    Found on disk, not imported (transformers 5 imports torch with its auto configs)."""
    if site_packages_of is None:
        import importlib.util

        spec = importlib.util.find_spec("transformers")  # the top-level package: found, not imported
        locations = list(spec.submodule_search_locations or []) if spec else []
        return Path(locations[0]) if locations else None
    env = Path(site_packages_of).parent.parent
    return next((p for p in sorted(env.glob("lib/python*/site-packages/transformers")) if p.is_dir()), None)


@functools.lru_cache(maxsize=8)
def known_model_types(transformers_dir: Path) -> frozenset[str] | None:
    """transformers' CONFIG_MAPPING_NAMES keys (the model_type values it loads), read from its source with
    ast: models/auto/auto_mappings.py (transformers 5) or configuration_auto.py (4), the mapping's literal
    and the literal entries added to it. None when neither file has it (an unknown layout: left unchecked)."""
    names: set[str] = set()
    for source in ("auto_mappings.py", "configuration_auto.py"):
        file = Path(transformers_dir) / "models" / "auto" / source
        if not file.is_file():
            continue
        for statement in ast.parse(file.read_text(encoding="utf-8")).body:
            if _mentions_config_mapping(statement):
                for node in ast.walk(statement):
                    if isinstance(node, ast.Dict):
                        names.update(
                            k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                        )
                    elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
                        key = node.elts[0]
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            names.add(key.value)
    return frozenset(names) or None


def _mentions_config_mapping(statement: ast.stmt) -> bool:
    """`CONFIG_MAPPING_NAMES = ...` (annotated or not), or `CONFIG_MAPPING_NAMES.update(...)`."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return any(isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING_NAMES" for t in targets)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        return (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "CONFIG_MAPPING_NAMES"
        )
    return False


def _version(transformers_dir: Path) -> str:
    try:
        found = re.search(r'^__version__ = "([^"]+)"', (Path(transformers_dir) / "__init__.py").read_text(), re.M)
    except OSError:
        found = None
    return found.group(1) if found else ""


def materialize_model(config: RunConfig, plugins: PluginManager | None = None) -> str:
    """Build a builtin model on first use; return the path the engine loads."""
    return materialize_path(config.model.path, "model.path", plugins)


def materialize_path(path: str, field: str, plugins: PluginManager | None = None) -> str:
    """Build the builtin model `path` names on first use (`field` names the config field in errors);
    return the path the engine loads."""
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX) :]
        builder = (plugins or get_plugin_manager()).get("model_builder", name, field)
        return _quietly(builder.build, builtin_model_dir(name))
    return resolve_path(path)
