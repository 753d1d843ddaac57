"""Reading an engine recipe (a launch script, a command line, a config file) into native settings.

Shared by the adapters' recipe importers (adapters/<engine>/importer.py): a shell reader that
finds the launch command, resolves `$VAR` from the script's own assignments and keeps the line
every argument came from; YAML/JSON readers that keep line numbers; and the data types the
importer (rlbridge.run.importer) works on. Nothing from the recipe is ever executed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


# --- shell scripts -------------------------------------------------------------------------

_ASSIGN = re.compile(r"^(?:export\s+|local\s+|declare\s+(?:-\w+\s+)?)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*)|\{@[^}]*\}|@|\*|\{\*\}|\((.*?)\))")


@dataclass
class ShellCommand:
    """A command found in a shell script: its words (with the line of each) after the marker word."""

    words: list[Token]
    args: list[Token]
    line: int
    variables: dict[str, str]
    notes: list[tuple[int | None, str]]


def logical_lines(text: str) -> list[list[tuple[str, int]]]:
    """Physical lines joined at trailing backslashes; each logical line keeps its segments' line numbers."""
    out: list[list[tuple[str, int]]] = []
    current: list[tuple[str, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            current.append((stripped[:-1], number))
            continue
        current.append((stripped, number))
        out.append(current)
        current = []
    if current:
        out.append(current)
    return out


class _Expander:
    def __init__(self, variables: dict[str, str], notes: list[tuple[int | None, str]]):
        self.variables = variables
        self.notes = notes

    def expand(self, text: str, line: int) -> str:
        def sub(match: re.Match) -> str:
            name = match.group(1) or match.group(4)
            if match.group(5) is not None:
                self.notes.append((line, f"command substitution $({match.group(5)}) is not run; kept literally"))
                return match.group(0)
            if name is None:  # $@, ${@:1}, $*: the script's own arguments
                self.notes.append((line, f"{match.group(0)} (arguments passed to the script) is empty here"))
                return ""
            value = None
            if name in self.variables:
                value = self.variables[name]
            elif name in os.environ:
                value = os.environ[name]
                self.notes.append((line, f"${name} is not set in the script; taken from your environment ({value})"))
            has_default = match.group(2) is not None  # ${X:-default}, ${X-default}
            if value is not None and not (has_default and match.group(2).startswith(":") and value == ""):
                return value
            if has_default:
                return self.expand(match.group(3) or "", line)
            self.notes.append((line, f"${name} is not set in the script or your environment; kept literally"))
            return match.group(0)

        return _VAR.sub(sub, text)


def split_words(segments: list[tuple[str, int]], expander: _Expander) -> list[Token]:
    """Shell word splitting with quotes, escapes, comments and `$VAR` expansion (not in single quotes)."""
    words: list[Token] = []
    buf: list[str] = []
    start = 0
    in_word = False
    quote = ""
    for text, line in segments:
        i = 0
        while i < len(text):
            c = text[i]
            if quote == "'":
                if c == "'":
                    quote = ""
                else:
                    buf.append(c)
                i += 1
                continue
            if quote == '"':
                if c == '"':
                    quote = ""
                    i += 1
                    continue
                if c == "\\" and i + 1 < len(text) and text[i + 1] in '"\\$`':
                    buf.append(text[i + 1])
                    i += 2
                    continue
                j = i
                while j < len(text) and text[j] not in '"\\':
                    j += 1
                buf.append(expander.expand(text[i:j], line))
                i = j if j > i else i + 1
                continue
            if c in " \t":
                if in_word:
                    words.append(Token("".join(buf), start))
                    buf, in_word = [], False
                i += 1
                continue
            if c == "#" and not in_word:
                break
            if c == ";" or (c == "&" and text[i:i + 2] == "&&") or (c == "|"):
                if in_word:
                    words.append(Token("".join(buf), start))
                    buf, in_word = [], False
                words.append(Token(c, line))  # a command separator
                i += 2 if text[i:i + 2] in ("&&", "||") else 1
                continue
            if not in_word:
                in_word, start = True, line
            if c in "'\"":
                quote = c
                i += 1
                continue
            if c == "\\" and i + 1 < len(text):
                buf.append(text[i + 1])
                i += 2
                continue
            j = i
            while j < len(text) and text[j] not in " \t'\"\\;|&#":
                j += 1
            if j < len(text) and text[j] == "#":  # '#' inside a word is not a comment
                j += 1
            buf.append(expander.expand(text[i:j], line))
            i = j
        if in_word and not quote:
            words.append(Token("".join(buf), start))
            buf, in_word = [], False
        elif quote:
            buf.append(" ")
    if in_word:
        words.append(Token("".join(buf), start))
    return words


def find_command(text: str, markers: tuple[str, ...], source: str, what: str) -> ShellCommand:
    """The first command in `text` (a script or a command line) with a word in `markers`; its
    arguments after that word, `$VAR` resolved from the script's assignments."""
    variables: dict[str, str] = {}
    notes: list[tuple[int | None, str]] = []
    expander = _Expander(variables, notes)
    for segments in logical_lines(text):
        words = split_words(segments, expander)
        # split at command separators
        commands: list[list[Token]] = [[]]
        for word in words:
            if word.text in (";", "&", "|", "&&", "||"):
                commands.append([])
            else:
                commands[-1].append(word)
        for cmd in commands:
            if not cmd:
                continue
            marker = next((i for i, w in enumerate(cmd) if any(_is_marker(w.text, m) for m in markers)), None)
            if marker is not None:
                args = [w for w in cmd[marker + 1:] if w.text != ""]  # $@ and friends expand to nothing
                return ShellCommand(cmd[: marker + 1], args, cmd[marker].line, dict(variables), notes)
            # NAME=value assignments (also `export NAME=value`)
            if cmd[0].text in ("export", "local", "declare", "readonly"):
                cmd = [w for w in cmd[1:] if not w.text.startswith("-")]
            for word in cmd:
                m = _ASSIGN.match(word.text)
                if not m:
                    break
                variables[m.group(1)] = m.group(2)
    raise ConfigError(f"{source}: no {what} command found; rlbridge import reads the launch command of a recipe ({' or '.join(markers)})")


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
        raise ConfigError(f"{path}:{mark.line + 1 if mark else '?'}: YAML syntax error: {getattr(exc, 'problem', exc)}") from exc
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


def same(a: Any, b: Any) -> bool:
    """Native values compared as the engine would read them (1 == 1.0, (a, b) == [a, b])."""
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
