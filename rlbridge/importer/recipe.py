"""Reading an engine recipe (a launch script, a command line, a config file) into native settings.

Shared by the adapters' recipe importers (adapters/<engine>/importer.py): a shell reader that
finds the launch command, resolves `$VAR` from the script's own assignments and keeps the line
every argument came from; YAML/JSON readers that keep line numbers. The data types they return are
the contract's (rlbridge.contract.importing). Nothing from the recipe is ever executed.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

import yaml

from rlbridge.contract.importing import RecipeSource, ShellCommand, Token
from rlbridge.errors import ConfigError


class StaticRecipeSource(RecipeSource):
    """A recipe argument (a file or a command line) with this module's static readers: the importer's
    RecipeSource, which `import_recipe` hands the adapter's importer."""

    def __init__(self, argument: str):
        self.argument = argument
        self.path = Path(argument)
        self.is_file = is_file(argument)
        self.name = str(self.path) if self.is_file else "<command line>"

    @property
    def text(self) -> str:
        return self.path.read_text() if self.is_file else self.argument

    def command(self, markers: tuple[str, ...], what: str) -> ShellCommand:
        return find_command(self.text, markers, self.name, what)

    def mapping(self, path: Path | None = None) -> tuple[Any, dict[str, int]]:
        return read_mapping(self.path if path is None else path)


# --- shell scripts -------------------------------------------------------------------------


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
