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

import base64
import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rlbridge.errors import ConfigError

PLUGINS_ENV = "RLBRIDGE_PLUGINS"
__path__: list[str] = []  # a file loaded here is the submodule m_<its path, base32>: importable by name anywhere


def module_name(path: Path) -> str:
    """The import name of a local file: this module's child named after the file's absolute path, so
    that any process (a spawned reward worker unpickling a plugin's function) can import it by name."""
    encoded = base64.b32encode(str(path).encode()).decode().rstrip("=").lower()
    return f"{__name__}.m_{encoded}"


class _LocalFileFinder(importlib.abc.MetaPathFinder):
    """Finds `<this module>.m_<base32 path>` at that path."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = f"{__name__}.m_"
        if not fullname.startswith(prefix):
            return None
        encoded = fullname[len(prefix) :].upper()
        try:
            file = Path(base64.b32decode(encoded + "=" * (-len(encoded) % 8)).decode())
        except (ValueError, UnicodeDecodeError):
            return None
        if not file.is_file():
            return None
        if str(file.parent) not in sys.path:
            sys.path.append(str(file.parent))  # its sibling modules import as they would beside a script
        return importlib.util.spec_from_file_location(fullname, file)


if not any(isinstance(f, _LocalFileFinder) for f in sys.meta_path):
    sys.meta_path.append(_LocalFileFinder())


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
            raise ConfigError(
                f"{field}: cannot import module '{target}' ({exc}); give an importable module or a path to a .py file"
            ) from exc
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(
            f"{field}: no file {target}; give the path of a .py file (relative to the config file or absolute)"
        )
    try:
        return importlib.import_module(module_name(path))  # once per process, through _LocalFileFinder
    except Exception as exc:
        raise ConfigError(f"{field}: {path} failed to import: {type(exc).__name__}: {exc}") from exc


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
