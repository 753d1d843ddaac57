"""Plugins and functions from a file or a module, without packaging (as pytest's `-p` and conftest).

A reference is either a Python file (`path/to/file.py`, optionally `:attribute`) or an importable
module (`my_pkg.rewards`, optionally `:attribute`). The config's `plugins:` list and the CLI's `-p`
name plugin modules; a native reward's `function:` names a function. File references are made
absolute when the config is loaded (relative to the config file's directory, else the current
one), so that every engine process resolves them the same way.

The user's process registers the plugin modules in its plugin manager and exports the list in
RLBRIDGE_PLUGINS; every process of the run (the engine child, Ray actors, vLLM workers) inherits it,
and its plugin manager registers the same modules on creation. A file is loaded once per process
under a stable module name, so a plugin module and a native reward in the same file share state.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rlbridge.errors import ConfigError

PLUGINS_ENV = "RLBRIDGE_PLUGINS"


def is_file_ref(ref: str) -> bool:
    """True for a path to a .py file (with or without ':attribute'), False for a module name."""
    target = ref.rsplit(":", 1)[0] if ref.count(":") and not _is_windows_drive(ref) else ref
    return target.endswith(".py") or "/" in target or os.sep in target


def _is_windows_drive(ref: str) -> bool:
    return len(ref) > 1 and ref[1] == ":" and ref.count(":") == 1


def split_ref(ref: str) -> tuple[str, str | None]:
    """('path.py' or 'pkg.mod', attribute or None)."""
    if ":" in ref:
        target, _, attribute = ref.rpartition(":")
        return target, attribute or None
    return ref, None


def absolute_ref(ref: str, base_dirs: list[Path]) -> str:
    """A file reference made absolute: the first base directory holding the file wins (else the
    reference is returned unchanged, and loading it reports the missing file)."""
    if not is_file_ref(ref):
        return ref
    target, attribute = split_ref(ref)
    path = Path(target).expanduser()
    if not path.is_absolute():
        for base in base_dirs:
            if (base / path).is_file():
                path = base / path
                break
    resolved = str(path.resolve()) if path.is_file() else target
    return f"{resolved}:{attribute}" if attribute else resolved


def load_module(target: str, field: str) -> ModuleType:
    """Import a module by file path or dotted name; errors name the config field."""
    if not is_file_ref(target):
        try:
            return importlib.import_module(target)
        except ImportError as exc:
            raise ConfigError(f"{field}: cannot import module '{target}' ({exc}); give an importable module or a path to a .py file") from exc
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{field}: no file {target}; give the path of a .py file (relative to the config file or absolute)")
    name = f"rlbridge_local.{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing: dataclasses and pickling look the module up
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # its sibling modules import as they would beside a script
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"{field}: {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def load_object(ref: str, field: str) -> Any:
    """The attribute a 'path.py:name' or 'pkg.mod:name' reference names."""
    target, attribute = split_ref(ref)
    if attribute is None:
        raise ConfigError(f"{field}: '{ref}' names no function; write FILE.py:NAME or package.module:NAME")
    module = load_module(target, field)
    obj = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n]))
            raise ConfigError(f"{field}: {target} has no '{attribute}'; callables there: {', '.join(public) or 'none'}")
        obj = getattr(obj, part)
    return obj


def register_local_plugins(pm, refs: list[str], field: str = "plugins") -> None:
    """Register each plugin module (by file or module name) in the plugin manager, once."""
    for i, ref in enumerate(refs):
        module = load_module(ref, f"{field}[{i}]")
        name = f"local:{ref}"
        if pm.pm.get_plugin(name) is None and not pm.pm.is_registered(module):
            pm.register(module, name, distribution="(local)")


def export_local_plugins(refs: list[str]) -> None:
    """Make the run's processes (which inherit this environment) load the same plugin modules."""
    if refs:
        os.environ[PLUGINS_ENV] = json.dumps(list(refs))
    else:
        os.environ.pop(PLUGINS_ENV, None)


def load_from_env(pm) -> None:
    """Register the plugin modules the user's process exported (called by every new plugin manager)."""
    raw = os.environ.get(PLUGINS_ENV)
    if raw:
        register_local_plugins(pm, json.loads(raw), PLUGINS_ENV)


def resolve_config_refs(config, base_dir: Path | None) -> None:
    """Make the config's file references absolute (plugins, native reward functions): relative to the
    config file's directory first, then the current one."""
    bases = [Path(base_dir).resolve(), Path.cwd()] if base_dir is not None else [Path.cwd()]
    config.plugins = [absolute_ref(ref, bases) for ref in config.plugins]
    for spec in config.reward:
        if spec.native and spec.function:
            spec.function = absolute_ref(spec.function, bases)
