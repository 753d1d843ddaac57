"""Reading an engine recipe (a launch script, a command line, a config file) into native settings.

Shared by the adapters' recipe importers (adapters/<engine>/importer.py): a shell reader that
finds the launch command, resolves `$VAR` from the script's own assignments and keeps the line
every argument came from; YAML/JSON readers that keep line numbers; and the data types the
importer (rlbridge.importer) works on. Nothing from the recipe is ever executed.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from rlbridge.errors import ConfigError


@dataclass
class Setting:
    """One native setting of a recipe: the engine's key (normalised spelling), its value, and where it came from."""

    key: str
    value: Any
    line: int | None = None
    text: str = ""
    """The setting as written (e.g. `actor_rollout_ref.actor.optim.lr=1e-6`)."""
    spelling: str = ""
    """The key as written, when the importer normalised it (e.g. a `+` prefix, a flat OpenRLHF flag)."""
    unknown: str = ""
    """Why the value cannot be known without running the script (e.g. a `$(...)` the reader does not run):
    the value is then the text as written, and the importer reports the setting instead of importing it."""


@dataclass
class Recipe:
    """What an adapter's reader found in a recipe."""

    engine: str
    source: str
    version: str
    settings: list[Setting]
    notes: list[tuple[int | None, str]] = field(default_factory=list)
    """Things the reader could not take literally (unresolved variables, extra arguments), with lines."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Reader-specific facts (e.g. the TRL config class of a Python file)."""

    def where(self, line: int | None) -> str:
        return f"{self.source}:{line}" if line else self.source


@dataclass
class Token:
    text: str
    line: int
    unknown: str = ""
    """Why the word's value is unknown without running the script ('' when it is known)."""


# --- shell scripts -------------------------------------------------------------------------


@dataclass
class ShellCommand:
    """A command found in a shell script: its words (with the line of each) after the marker word."""

    words: list[Token]
    args: list[Token]
    line: int
    variables: dict[str, str]
    notes: list[tuple[int | None, str]]


_LAUNCH_ENV: ContextVar[dict[str, str] | None] = ContextVar("rlbridge_launch_env", default=None)


@contextmanager
def launch_environment(variables: dict[str, str]) -> Iterator[None]:
    """Variables a launch script reads as if they were in the environment it runs in (`rlbridge import --env
    NAME=VALUE`), over this process's own, for the recipes read inside the block; `PWD` names the directory
    the script is read as launched from."""
    token = _LAUNCH_ENV.set(dict(variables))
    try:
        yield
    finally:
        _LAUNCH_ENV.reset(token)


def is_file(source: str) -> bool:
    """Whether a recipe argument names a file (else it is a command line: one longer than a file name can be, or
    with a NUL byte, is not a file either)."""
    try:
        return Path(source).is_file()
    except (OSError, ValueError):
        return False


def find_command(text: str, markers: tuple[str, ...], source: str, what: str) -> ShellCommand:
    """The first command in `text` (a script or a command line) with a word in `markers`: the words bash
    would pass it, read statically by rlbridge.importer.shell_reader (nothing is run), each with its line. A script file
    (`source` names one) is read as bash runs it from its own directory, `$0` its real path."""
    from rlbridge.importer.shell_reader import read_launch

    given = _LAUNCH_ENV.get() or {}
    script = str(Path(source).resolve()) if source and is_file(source) else None
    found = read_launch(
        text,
        source,
        lambda word: any(_is_marker(word, m) for m in markers),
        what,
        environ={**os.environ, **given},
        script=script,
        cwd=given.get("PWD"),
    )

    def token(f) -> Token:
        return Token(f.text, f.line, f.unknown.reason if f.unknown is not None else "")

    return ShellCommand(
        [token(f) for f in found.words], [token(f) for f in found.args], found.line, found.variables, found.notes
    )


def _is_marker(word: str, marker: str) -> bool:
    return word == marker or word.endswith("/" + marker) or word.replace("/", ".").removesuffix(".py").endswith(marker)


# --- values and config files ---------------------------------------------------------------


def scalar(text: str) -> Any:
    """A command-line value as a number when it is one, else the string."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_mapping(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """A YAML or JSON mapping and the line of each top-level (and nested, dotted) key."""
    text = path.read_text()
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: JSON syntax error: {exc.msg}") from exc
        lines = {}
        for key in _flat_keys(data):
            last = key.rsplit(".", 1)[-1]
            m = re.search(r'"' + re.escape(last) + r'"\s*:', text)
            if m:
                lines[key] = text.count("\n", 0, m.start()) + 1
        return data, lines
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            f"{path}:{mark.line + 1 if mark else '?'}: YAML syntax error: {getattr(exc, 'problem', exc)}"
        ) from exc
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        _node_lines(node, "", lines)
    return data, lines


def _node_lines(node: yaml.MappingNode, prefix: str, lines: dict[str, int]) -> None:
    for key_node, value_node in node.value:
        key = f"{prefix}{key_node.value}"
        lines[key] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.MappingNode):
            _node_lines(value_node, key + ".", lines)


def _flat_keys(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    out = []
    for key, value in data.items():
        out.append(prefix + str(key))
        out += _flat_keys(value, f"{prefix}{key}.")
    return out


_EXACT = (str, int, float, bool, type(None))  # types whose equal values are `same` whatever the rules below say


def same(a: Any, b: Any) -> bool:
    """Native values compared as the engine would read them (1 == 1.0, (a, b) == [a, b])."""
    kind = type(a)
    # the fast paths: the importer's search compares millions of equal scalars and shared objects
    if kind is type(b) and kind in _EXACT and a == b:
        return True
    if a is b and kind not in _EXACT:  # one object (a float is compared by value: NaN is not same as itself)
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str) and a != b and ("/" in a or "/" in b):
        return os.path.normpath(os.path.expanduser(a)) == os.path.normpath(os.path.expanduser(b))
    return a == b
