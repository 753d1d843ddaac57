"""A static reader of bash launch scripts: finds the launch command and the words bash would pass it.

Nothing is executed. The script is lexed (quotes, `$(...)`, `${...}`, `$((...))`, heredocs,
redirections such as `2>&1`, `>&2`, `&>>`, job control `&`), parsed into commands, `if`/`elif`,
`case`, `for`, `while`, `{ }`, `( )` and functions, and interpreted for what decides the launch
command's words: assignments (scalars, arrays `A=(...)`, `A+=(...)`, `export`, `declare`), parameter
expansions (`${A:-${B:-/x}/y}`, `${A:=w}`, `${A:+w}`, `${#A}`, `${A#p}`, `${A%p}`, `${A/p/r}`,
`${A:o:l}`, `"${ARR[@]}"` splicing one word per element), arithmetic `$((...))`, and conditions
bash's `[`/`[[`/`test` decide from strings and numbers.

Hand-written, not bashlex (PyPI, GPL-3.0, last release 2023): bashlex rejects bash arrays (`A=(x y)`,
"unexpected token '('"), which 88 of verl 0.9's 91 main_ppo example scripts use, splits nested defaults
(`${A:-${B:-/x}/y}` parses as `A:-${B:-/x`), and evaluates nothing: expansion, arrays and conditions
would still be ours. Python's shlex has no `$` semantics (quotes are dropped before expansion).

The script is read as bash runs it from its own directory: `$0` and `${BASH_SOURCE[0]}` are its real
path, `$PWD` and `pwd` its directory (`--env PWD=DIR` for another). Command substitutions made only of
`cd`, `pwd`, `dirname`, `basename`, `realpath`, `readlink -f` and `echo` (`$(cd "$(dirname "$0")/.." && pwd)`)
are evaluated as bash would, on this machine's directories; `cd` in the script itself moves the directory
the rest of it reads.

What cannot be known without running (any other `$(...)` result, a file test, a `while` loop, `source`,
a `cd` into a directory that is not here) is unknown: a launch word built from it carries the reason
(the importer reports that setting, with its line, as needing the user), and when a branch depends on
it, every variable the branch sets becomes unknown; a launch word built from one is an error naming its
line, the branch and what to set. Every lexer step consumes input, so no input makes the reader loop.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rlbridge.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_RESERVED_START = {"if", "for", "while", "until", "case", "{", "(", "function", "select"}
_MAX_STEPS = 200_000  # interpreter steps (loop iterations, function calls): a script is not a program to run
_MAX_ITERATIONS = 1000
_TESTS = {"[", "[[", "test", "true", "false", ":", "!"}


# --- tokens -----------------------------------------------------------------------------------


@dataclass
class Tok:
    kind: str  # "word" | "op" | "nl" | "array" | "redir"
    text: str
    line: int
    items: list[tuple[str, int]] = field(default_factory=list)
    """array: the raw element words with their lines; redir: [(target word, line)]."""


class ShellError(ConfigError):
    pass


class Lexer:
    OPS = ("&&", "||", ";;&", ";;", ";&", "|&", ";", "&", "|", "(", ")")

    def __init__(self, text: str, source: str):
        self.s, self.src, self.i, self.line = text, source, 0, 1
        self.heredocs: list[tuple[str, bool]] = []
        self.out: list[Tok] = []

    def fail(self, line: int, message: str) -> ShellError:
        return ShellError(f"{self.src}:{line}: {message}")

    def tokens(self) -> list[Tok]:
        s = self.s
        while self.i < len(s):
            start = self.i
            c = s[self.i]
            if c == "\\" and s.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
            elif c in " \t\r":
                self.i += 1
            elif c == "\n":
                self.out.append(Tok("nl", "\n", self.line))
                self.i += 1
                self.line += 1
                if self.heredocs:
                    self.read_heredocs()
            elif c == "#":
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            elif self.redirection():
                pass
            elif any(s.startswith(op, self.i) for op in self.OPS):
                op = next(op for op in self.OPS if s.startswith(op, self.i))
                self.out.append(Tok("op", op, self.line))
                self.i += len(op)
            else:
                self.word()
            if self.i <= start:  # every step consumes input: no input makes the reader loop
                raise self.fail(self.line, f"cannot read {s[start : start + 20]!r}")
        self.out.append(Tok("nl", "\n", self.line))
        return self.out

    _REDIR = re.compile(r"(\d*|&)(>>|>&|<&|<<<|<<-|<<|>\||<>|>|<)")

    def redirection(self) -> bool:
        """`[n]>file`, `2>&1`, `>&2`, `&>file`, `&>>file`, `<<EOF` (its body skipped at the next line)."""
        m = self._REDIR.match(self.s, self.i)
        if not m:
            return False
        if m.group(1) == "&" and m.group(2) not in (">", ">>"):
            return False  # `&<`: the `&` is a separator
        line = self.line
        self.i = m.end()
        op = m.group(2)
        if op in ("<", ">") and self.s.startswith("(", self.i):  # <(...) >(...): process substitution, a word
            self.i = m.start()
            return False
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1
        if self.i >= len(self.s) or self.s[self.i] in "\n;|&()<>":
            if op in (">&", "<&") or op.startswith("<<"):
                raise self.fail(line, f"redirection {m.group(0)!r} without a target")
            raise self.fail(line, f"redirection {m.group(0)!r} without a target file")
        target = self.raw_word()
        if op in ("<<", "<<-"):
            self.heredocs.append((re.sub(r"[\"'\\]", "", target), op == "<<-"))
        self.out.append(Tok("redir", m.group(0), line, [(target, line)]))
        return True

    def read_heredocs(self) -> None:
        for delimiter, strip_tabs in self.heredocs:
            while True:
                if self.i >= len(self.s):
                    raise self.fail(
                        self.line, f"here-document ends before its delimiter {delimiter!r} (a truncated script?)"
                    )
                end = self.s.find("\n", self.i)
                end = len(self.s) if end < 0 else end
                body = self.s[self.i : end]
                self.i = min(end + 1, len(self.s)) if end < len(self.s) else len(self.s)
                self.line += 1
                if (body.lstrip("\t") if strip_tabs else body) == delimiter:
                    break
                if end >= len(self.s):
                    raise self.fail(
                        self.line, f"here-document ends before its delimiter {delimiter!r} (a truncated script?)"
                    )
        self.heredocs = []

    def word(self) -> None:
        line = self.line
        raw = self.raw_word()
        m = _ASSIGN.match(raw)
        if m and raw == m.group(0) and self.s.startswith("(", self.i):  # NAME=( ... ) array assignment
            self.i += 1
            items: list[tuple[str, int]] = []
            while True:
                start = self.i
                if self.i >= len(self.s):
                    raise self.fail(line, f"array {m.group(1)}=( is never closed (a truncated script?)")
                c = self.s[self.i]
                if c == ")":
                    self.i += 1
                    break
                if c == "\\" and self.s.startswith("\\\n", self.i):
                    self.i += 2
                    self.line += 1
                elif c in " \t\r":
                    self.i += 1
                elif c == "\n":
                    self.i += 1
                    self.line += 1
                elif c == "#":
                    while self.i < len(self.s) and self.s[self.i] != "\n":
                        self.i += 1
                else:
                    item_line = self.line
                    items.append((self.raw_word(), item_line))
                if self.i <= start:
                    raise self.fail(self.line, f"cannot read {self.s[start : start + 20]!r} in array {m.group(1)}")
            self.out.append(Tok("array", raw, line, items))
            return
        self.out.append(Tok("word", raw, line))

    def raw_word(self) -> str:
        """One shell word, quotes and expansions kept as written (they are expanded later)."""
        s, start = self.s, self.i
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r\n;|&()<>":
                if c in "<>" and self.i + 1 < len(s) and s[self.i + 1] == "(":  # <(process substitution)
                    self.i += 1
                    self.skip_group("(", ")")
                    continue
                break
            if c == "\\":
                if s.startswith("\\\n", self.i):
                    self.line += 1
                self.i += 2
            elif c == "'":
                self.skip_single()
            elif c == '"':
                self.skip_double()
            elif c == "`":
                self.skip_backtick()
            elif c == "$" and s.startswith("$((", self.i):
                self.i += 1
                self.skip_group("(", ")")
            elif c == "$" and s.startswith("$(", self.i):
                self.i += 1
                self.skip_group("(", ")")
            elif c == "$" and s.startswith("${", self.i):
                self.i += 1
                self.skip_group("{", "}")
            elif c == "$" and s.startswith("$'", self.i):
                self.i += 1
                self.skip_single(ansi=True)
            else:
                self.i += 1
        if self.i > len(s):
            self.i = len(s)
        return s[start : self.i]

    def _advance_newline(self, c: str) -> None:
        if c == "\n":
            self.line += 1

    def skip_single(self, ansi: bool = False) -> None:
        line = self.line
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            if ansi and c == "\\":
                self._advance_newline(self.s[self.i + 1] if self.i + 1 < len(self.s) else "")
                self.i += 2
                continue
            self._advance_newline(c)
            self.i += 1
            if c == "'":
                return
        raise self.fail(line, "unterminated ' quote (a truncated script?)")

    def skip_double(self) -> None:
        line = self.line
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                self._advance_newline(self.s[self.i + 1] if self.i + 1 < len(self.s) else "")
                self.i += 2
            elif c == "`":
                self.skip_backtick()
            elif c == "$" and self.s.startswith("$(", self.i):
                self.i += 1
                self.skip_group("(", ")")
            elif c == "$" and self.s.startswith("${", self.i):
                self.i += 1
                self.skip_group("{", "}")
            else:
                self._advance_newline(c)
                self.i += 1
        raise self.fail(line, 'unterminated " quote (a truncated script?)')

    def skip_backtick(self) -> None:
        line = self.line
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
                continue
            self._advance_newline(c)
            self.i += 1
            if c == "`":
                return
        raise self.fail(line, "unterminated ` command substitution (a truncated script?)")

    def skip_group(self, open_: str, close: str) -> None:
        """From an opening `(` or `{` to its match, quotes and nested groups respected."""
        line = self.line
        depth = 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\":
                self._advance_newline(self.s[self.i + 1] if self.i + 1 < len(self.s) else "")
                self.i += 2
                continue
            if c == "'" and open_ == "(":
                self.skip_single()
                continue
            if c == '"':
                self.skip_double()
                continue
            if c == "`":
                self.skip_backtick()
                continue
            if c == "$" and self.s.startswith("${", self.i) and open_ == "(":
                self.i += 1
                self.skip_group("{", "}")
                continue
            if c == "$" and self.s.startswith("$(", self.i) and open_ == "{":
                self.i += 1
                self.skip_group("(", ")")
                continue
            self._advance_newline(c)
            self.i += 1
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return
        what = "$(" if open_ == "(" else "${"
        raise self.fail(line, f"{what} is never closed (a truncated script?)")


# --- parsing ----------------------------------------------------------------------------------


@dataclass
class Simple:
    words: list[Tok]  # words and array tokens, in order (assignments first)
    redirs: list[Tok]
    line: int


@dataclass
class AndOr:
    first: Any
    rest: list[tuple[str, Any]]  # ("&&" | "||" | "|", node)
    line: int


@dataclass
class If:
    branches: list[tuple[list[Any] | None, list[Any]]]  # (condition, body); condition None: else
    line: int


@dataclass
class For:
    var: str
    items: list[Tok] | None  # None: `for x; do` (the positional parameters) or a C-style loop
    body: list[Any]
    line: int
    c_style: bool = False


@dataclass
class Loop:
    kind: str  # while | until | select
    cond: list[Any]
    body: list[Any]
    line: int


@dataclass
class Case:
    word: Tok
    arms: list[tuple[list[Tok], list[Any]]]
    line: int


@dataclass
class Group:
    body: list[Any]
    line: int
    subshell: bool


@dataclass
class Function:
    name: str
    body: Any
    line: int


class Parser:
    def __init__(self, toks: list[Tok], source: str):
        self.t, self.p, self.src = toks, 0, source

    def fail(self, tok: Tok, message: str) -> ShellError:
        return ShellError(f"{self.src}:{tok.line}: {message}")

    def peek(self) -> Tok:
        return self.t[min(self.p, len(self.t) - 1)]

    def at_word(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind == "word" and tok.text in texts

    def at_op(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text in texts

    def next(self) -> Tok:
        tok = self.peek()
        self.p += 1
        return tok

    def skip_newlines(self) -> None:
        while self.p < len(self.t) - 1 and self.peek().kind == "nl":
            self.p += 1

    def done(self) -> bool:
        return self.p >= len(self.t) - 1

    def program(self) -> list[Any]:
        body = self.list_until(set())
        if not self.done():
            tok = self.peek()
            raise self.fail(tok, f"unexpected {tok.text!r}")
        return body

    def list_until(self, enders: set[str]) -> list[Any]:
        out: list[Any] = []
        while True:
            self.skip_newlines()
            if self.done():
                return out
            tok = self.peek()
            if (tok.kind == "word" and tok.text in enders) or (
                tok.kind == "op" and tok.text in enders | {")", ";;", ";&", ";;&"}
            ):
                return out
            start = self.p
            out.append(self.and_or())
            if self.at_op(";", "&"):
                self.next()
            if self.p <= start:
                raise self.fail(tok, f"unexpected {tok.text!r}")

    def and_or(self) -> AndOr:
        line = self.peek().line
        first = self.command()
        rest: list[tuple[str, Any]] = []
        while self.at_op("&&", "||", "|", "|&"):
            op = self.next().text
            self.skip_newlines()
            if self.done():
                raise self.fail(self.peek(), f"the script ends after {op!r} (a truncated script?)")
            rest.append(("|" if op == "|&" else op, self.command()))
        return AndOr(first, rest, line)

    def expect_word(self, text: str, opener: Tok) -> None:
        self.skip_newlines()
        if not self.at_word(text):
            got = "the end of the script" if self.done() else repr(self.peek().text)
            raise self.fail(
                opener, f"`{opener.text}` at this line has no matching `{text}` (found {got}; a truncated script?)"
            )
        self.next()

    def command(self) -> Any:
        tok = self.peek()
        if tok.kind == "word" and tok.text == "!":
            self.next()
            tok = self.peek()
        if tok.kind == "word" and tok.text == "if":
            node = self.if_()
        elif tok.kind == "word" and tok.text == "for":
            node = self.for_()
        elif tok.kind == "word" and tok.text in ("while", "until", "select"):
            node = self.loop()
        elif tok.kind == "word" and tok.text == "case":
            node = self.case()
        elif tok.kind == "word" and tok.text == "{":
            self.next()
            body = self.list_until({"}"})
            self.expect_word("}", tok)
            node = Group(body, tok.line, False)
        elif tok.kind == "op" and tok.text == "(":
            self.next()
            if self.at_op("("):  # (( arithmetic )): a test we cannot always decide
                depth = 2
                self.next()
                while depth and not self.done():
                    t = self.next()
                    depth += (t.kind == "op" and t.text == "(") - (t.kind == "op" and t.text == ")")
                return Simple([Tok("word", "((", tok.line)], [], tok.line)
            body = self.list_until(set())
            if not self.at_op(")"):
                raise self.fail(tok, "`(` at this line is never closed (a truncated script?)")
            self.next()
            node = Group(body, tok.line, True)
        elif tok.kind == "word" and tok.text == "function":
            self.next()
            name = self.next()
            if self.at_op("("):
                self.next()
                self.next()
            self.skip_newlines()
            node = Function(name.text, self.command(), tok.line)
        elif (
            tok.kind == "word"
            and self.p + 2 < len(self.t)
            and self.t[self.p + 1].kind == "op"
            and self.t[self.p + 1].text == "("
            and self.t[self.p + 2].kind == "op"
            and self.t[self.p + 2].text == ")"
        ):
            self.p += 3
            self.skip_newlines()
            node = Function(tok.text, self.command(), tok.line)
        else:
            return self.simple()
        while self.peek().kind == "redir":
            self.next()
        return node

    def simple(self) -> Simple:
        tok = self.peek()
        words: list[Tok] = []
        redirs: list[Tok] = []
        while True:
            t = self.peek()
            if t.kind == "word" and t.text == "[[" and not words:
                # [[ ... ]] is one command: its && || ( ) are the test's own operators
                words.append(self.next())
                while not self.done() and not self.at_word("]]") and self.peek().kind != "nl":
                    inner = self.next()
                    words.append(Tok("word", inner.text, inner.line) if inner.kind == "op" else inner)
                if self.at_word("]]"):
                    words.append(self.next())
            elif t.kind in ("word", "array"):
                words.append(self.next())
            elif t.kind == "redir":
                redirs.append(self.next())
            else:
                break
        if not words and not redirs:
            raise self.fail(tok, f"unexpected {tok.text!r}" if tok.kind != "nl" else "a command is missing here")
        return Simple(words, redirs, tok.line)

    def if_(self) -> If:
        opener = self.next()
        branches: list[tuple[list[Any] | None, list[Any]]] = []
        cond = self.list_until({"then"})
        self.expect_word("then", opener)
        body = self.list_until({"elif", "else", "fi"})
        branches.append((cond, body))
        while True:
            self.skip_newlines()
            if self.at_word("elif"):
                self.next()
                cond = self.list_until({"then"})
                self.expect_word("then", opener)
                branches.append((cond, self.list_until({"elif", "else", "fi"})))
            elif self.at_word("else"):
                self.next()
                branches.append((None, self.list_until({"fi"})))
            else:
                break
        self.expect_word("fi", opener)
        return If(branches, opener.line)

    def for_(self) -> For:
        opener = self.next()
        if self.at_op("("):  # for (( ; ; ))
            depth = 0
            while not self.done():
                t = self.next()
                depth += (t.kind == "op" and t.text == "(") - (t.kind == "op" and t.text == ")")
                if depth == 0:
                    break
            if self.at_op(";"):
                self.next()
            self.expect_word("do", opener)
            body = self.list_until({"done"})
            self.expect_word("done", opener)
            return For("", None, body, opener.line, c_style=True)
        var = self.next()
        items: list[Tok] | None = None
        self.skip_newlines()
        if self.at_word("in"):
            self.next()
            items = []
            while self.peek().kind == "word":
                items.append(self.next())
        if self.at_op(";"):
            self.next()
        self.expect_word("do", opener)
        body = self.list_until({"done"})
        self.expect_word("done", opener)
        return For(var.text, items, body, opener.line)

    def loop(self) -> Loop:
        opener = self.next()
        if opener.text == "select":
            self.next()
            if self.at_word("in"):
                self.next()
                while self.peek().kind == "word":
                    self.next()
            cond: list[Any] = []
        else:
            cond = self.list_until({"do"})
        self.expect_word("do", opener)
        body = self.list_until({"done"})
        self.expect_word("done", opener)
        return Loop(opener.text, cond, body, opener.line)

    def case(self) -> Case:
        opener = self.next()
        word = self.next()
        self.skip_newlines()
        if not self.at_word("in"):
            raise self.fail(opener, "`case` without `in`")
        self.next()
        arms: list[tuple[list[Tok], list[Any]]] = []
        while True:
            self.skip_newlines()
            if self.at_word("esac") or self.done():
                break
            if self.at_op("("):
                self.next()
            patterns: list[Tok] = []
            while True:
                t = self.next()
                if t.kind != "word":
                    raise self.fail(t, f"a `case` pattern is expected, found {t.text!r}")
                patterns.append(t)
                if self.at_op("|"):
                    self.next()
                    continue
                if self.at_op(")"):
                    self.next()
                    break
                raise self.fail(t, f"a `case` pattern is expected to end with `)`, found {self.peek().text!r}")
            body = self.list_until({"esac"})
            arms.append((patterns, body))
            if self.at_op(";;", ";&", ";;&"):
                self.next()
        self.expect_word("esac", opener)
        return Case(word, arms, opener.line)


# --- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unknown:
    """Why a value cannot be known without running the script."""

    reason: str
    branch: bool = False  # set inside a branch that cannot be decided (an error when it reaches the launch command)


@dataclass
class Field:
    text: str
    line: int
    unknown: Unknown | None = None


@dataclass
class Var:
    value: str | list[Field]
    unknown: Unknown | None = None
    line: int = 0
    exported: bool = False


class _Exit(Exception):
    def __init__(self, line: int):
        self.line = line


@dataclass
class Launch:
    words: list[Field]
    marker: int
    line: int


class _Found(Exception):
    def __init__(self, launch: Launch):
        self.launch = launch


_BREAK = object()
_SPLICE = object()  # marks a "${A[@]}" splice (an empty array makes no field)


class _NotDeterministic(Exception):
    """A command substitution that is not made only of the commands rlbridge import evaluates."""


# commands whose output depends only on their arguments and this machine's directories: a command
# substitution made of these is evaluated (Interpreter.evaluate); any other is unknown
_EVALUATED = {"cd", "pwd", "dirname", "basename", "realpath", "readlink", "echo", "true", ":"}


class Interpreter:
    def __init__(
        self,
        source: str,
        is_launch: Callable[[str], bool],
        environ: dict[str, str] | None = None,
        script: str | None = None,
        cwd: str | None = None,
    ):
        self.src = source
        self.is_launch = is_launch
        self.env = dict(os.environ if environ is None else environ)
        self.script = script
        """The script's real path ($0, ${BASH_SOURCE[0]}); None for a command line."""
        self.cwd: str | Unknown = cwd or (os.path.dirname(script) if script else os.getcwd())
        """The directory bash would be in at this point of the script ($PWD, `pwd`; moved by `cd`)."""
        self.at_launch = True  # no `cd` has moved it: it is the launch directory (noted where read)
        self.pushed: list[tuple[str | Unknown, bool]] = []  # pushd's directory stack (cwd, at_launch)
        self.vars: dict[str, Var] = {}
        self.functions: dict[str, Function] = {}
        self.positional: list[Field] = []
        self.notes: list[tuple[int | None, str]] = []
        self.taint: Unknown | None = None  # set while inside a branch that cannot be decided
        self.steps = 0
        self.depth = 0

    def note(self, line: int | None, text: str) -> None:
        if (line, text) not in self.notes:
            self.notes.append((line, text))

    def fail(self, line: int, message: str) -> ShellError:
        return ShellError(f"{self.src}:{line}: {message}")

    def step(self, line: int) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise self.fail(
                line, "the script does too much to be read statically (a loop?); import its launch command alone"
            )

    # -- running the tree --
    def run(self, body: list[Any]) -> Launch | None:
        try:
            self.block(body)
        except _Found as found:
            return found.launch
        except _Exit:
            raise
        return None

    def block(self, body: list[Any]) -> None:
        for node in body:
            self.node(node)

    def node(self, node: Any) -> None:
        self.step(getattr(node, "line", 0))
        if isinstance(node, AndOr):
            self.and_or(node)
        elif isinstance(node, Simple):
            self.simple(node)
        elif isinstance(node, If):
            self.if_(node)
        elif isinstance(node, For):
            self.for_(node)
        elif isinstance(node, Loop):
            self.tainted(
                node.body,
                Unknown(f"the `{node.kind}` loop at line {node.line}, which rlbridge import does not run", True),
            )
        elif isinstance(node, Case):
            self.case(node)
        elif isinstance(node, Group):
            self.block(node.body)
        elif isinstance(node, Function):
            self.functions[node.name] = node

    def and_or(self, node: AndOr) -> None:
        # `a && b`, `a || b`: decided by a's status where a is a test bash decides from strings and numbers
        # (`[ "$pp" -gt 1 ] && x=$vpp || x=null`); any other command is taken to succeed (`cd X && python ...`),
        # so the part after `||` is its failure path, not read
        status = self.run_status(node.first)
        for op, other in node.rest:
            if op == "|":
                self.node(other)
                status = True
            elif isinstance(status, Unknown):
                self.tainted([other], Unknown(f"the `{op}` at line {node.line}, after {status.reason}", True))
            elif status is (op == "&&"):
                status = self.run_status(other)

    def run_status(self, node: Any) -> bool | Unknown:
        if isinstance(node, Simple) and node.words and node.words[0].kind == "word" and node.words[0].text in _TESTS:
            return self.status(node, node.line)
        self.node(node)
        return True

    def tainted(self, body: list[Any], why: Unknown, exits: bool = False) -> None:
        """Read a body that may or may not run: what it sets becomes unknown (why), and a launch command in
        it is an error (the import cannot know it runs)."""
        outer = self.taint
        self.taint = why if outer is None else outer
        try:
            self.block(body)
        except _Exit:
            pass  # an exit on a path that may not run: the script's error handling
        except _Found as found:
            raise self.fail(
                found.launch.line,
                f"the launch command is inside {self.taint.reason}; "
                "rlbridge import cannot tell whether it runs: move it out, or import the command line itself",
            ) from None
        finally:
            self.taint = outer

    def if_(self, node: If) -> None:
        for k, (cond, body) in enumerate(node.branches):
            if cond is None:
                self.block(body)
                return
            verdict = self.condition(cond, node.line)
            if isinstance(verdict, Unknown):
                # undecidable from here on: every remaining branch may run
                why = Unknown(f"the `if` at line {node.line}, whose condition reads {verdict.reason}", True)
                for _, later in node.branches[k:]:
                    self.tainted(later, why)
                return
            if verdict:
                self.block(body)
                return

    def for_(self, node: For) -> None:
        if node.c_style:
            self.tainted(
                node.body,
                Unknown(f"the C-style `for` loop at line {node.line}, which rlbridge import does not run", True),
            )
            return
        items = (
            self.positional
            if node.items is None
            else [f for tok in node.items for f in self.expand(tok.text, tok.line)]
        )
        unknown = next((f.unknown for f in items if f.unknown is not None), None)
        if unknown is not None:
            self.tainted(node.body, Unknown(f"the `for` loop at line {node.line}, over {unknown.reason}", True))
            return
        for item in items[:_MAX_ITERATIONS]:
            self.assign(node.var, item.text, node.line)
            self.block(node.body)

    def case(self, node: Case) -> None:
        (word,) = self.expand(node.word.text, node.word.line, split=False) or [Field("", node.word.line)]
        if word.unknown is not None:
            for _, body in node.arms:
                self.tainted(
                    body, Unknown(f"the `case` at line {node.line}, which branches on {word.unknown.reason}", True)
                )
            return
        for patterns, body in node.arms:
            for pattern in patterns:
                pat = self.pattern(pattern.text, pattern.line)
                if isinstance(pat, Unknown):
                    self.tainted(body, Unknown(f"the `case` at line {node.line}, whose pattern is {pat.reason}", True))
                    return
                if fnmatch.fnmatchcase(word.text, pat):
                    self.block(body)
                    return

    def condition(self, cond: list[Any], line: int) -> bool | Unknown:
        """The exit status of an `if` condition, when strings and numbers decide it."""
        result: bool | Unknown = True
        for node in cond:
            result = self.status(node, line)
        return result

    def status(self, node: Any, line: int) -> bool | Unknown:
        if isinstance(node, AndOr):
            result = self.status(node.first, line)
            for op, other in node.rest:
                if op == "|":
                    result = Unknown(f"the pipeline at line {node.line}, which rlbridge import does not run")
                elif op == "&&":
                    result = result if result is False else (self.status(other, line) if result is True else result)
                else:
                    result = result if result is True else (self.status(other, line) if result is False else result)
            return result
        if isinstance(node, Simple):
            words = [f for tok in node.words if tok.kind == "word" for f in self.expand(tok.text, tok.line)]
            negate = False
            while words and words[0].text == "!":
                negate, words = not negate, words[1:]
            verdict = self.test(words, node.line)
            if negate and not isinstance(verdict, Unknown):
                verdict = not verdict
            return verdict
        if isinstance(node, Group):
            return self.condition(node.body, line)
        return Unknown(f"the condition at line {line}, which rlbridge import does not run")

    def test(self, words: list[Field], line: int) -> bool | Unknown:
        if not words:
            return True
        head = words[0].text
        if head in ("true", ":"):
            return True
        if head == "false":
            return False
        if head in ("[", "[[", "test"):
            args = words[1:]
            if head != "test":
                if not args or args[-1].text not in ("]", "]]"):
                    return Unknown(f"the test at line {line}")
                args = args[:-1]
            return self.test_expr(args, line)
        shown = " ".join(w.text for w in words)
        return Unknown(f"the condition `{shown[:60]}` at line {line}, a command rlbridge import does not run")

    def test_expr(self, args: list[Field], line: int) -> bool | Unknown:
        # || and && (and -o / -a), lowest first
        for ops in (("||", "-o"), ("&&", "-a")):
            for i in range(len(args) - 1, -1, -1):
                if args[i].text in ops and i not in (0, len(args) - 1) and args[i].unknown is None:
                    left, right = self.test_expr(args[:i], line), self.test_expr(args[i + 1 :], line)
                    if ops[0] == "||":
                        if left is True or right is True:
                            return True
                        return left if isinstance(left, Unknown) else right
                    if left is False or right is False:
                        return False
                    return left if isinstance(left, Unknown) else right
        if args and args[0].text == "!":
            inner = self.test_expr(args[1:], line)
            return inner if isinstance(inner, Unknown) else not inner
        if len(args) >= 2 and args[0].text == "(" and args[-1].text == ")":
            return self.test_expr(args[1:-1], line)
        unknown = next((a.unknown for a in args if a.unknown is not None), None)
        if unknown is not None:
            return Unknown(f"the test at line {line}, which reads {unknown.reason}")
        texts = [a.text for a in args]
        if len(texts) == 1:
            return texts[0] != ""
        if len(texts) == 2:
            op, value = texts
            if op == "-z":
                return value == ""
            if op == "-n":
                return value != ""
            return Unknown(f"the test `{op} {value}` at line {line} (it reads the machine the script would run on)")
        if len(texts) == 3:
            a, op, b = texts
            if op in ("=", "=="):
                return a == b
            if op == "=~":
                try:
                    return re.search(b, a) is not None
                except re.error:
                    return Unknown(f"the regular expression {b!r} at line {line}")
            if op == "!=":
                return a != b
            if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
                try:
                    x, y = int(a), int(b)
                except ValueError:
                    return Unknown(f"the test `{a} {op} {b}` at line {line} (not numbers)")
                return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
            if op in ("<", ">"):
                return (a < b) if op == "<" else (a > b)
        return Unknown(f"the test `{' '.join(texts)[:60]}` at line {line}")

    def simple(self, node: Simple) -> None:
        words = node.words
        assignments: list[Tok] = []
        while words and (words[0].kind == "array" or _ASSIGN.match(words[0].text)):
            assignments.append(words[0])
            words = words[1:]
        if not words:
            for tok in assignments:
                self.assignment(tok)
            return
        fields = [f for tok in words for f in (self.expand(tok.text, tok.line) if tok.kind == "word" else [])]
        if not fields:
            return
        marker = next((i for i, f in enumerate(fields) if self.is_launch(f.text)), None)
        if marker is not None:
            raise _Found(Launch(fields, marker, fields[marker].line))
        name = fields[0].text
        if name in ("cd", "pushd"):  # the directory the rest of the script reads (`pwd`, relative paths)
            if name == "pushd":
                self.pushed.append((self.cwd, self.at_launch))
            try:
                moved = self.change_directory([f.text for f in fields[1:]], node.line)
            except _NotDeterministic:
                moved = Unknown(f"`{name}` at line {node.line}, whose target rlbridge import does not know")
            unknown = next((f.unknown for f in fields[1:] if f.unknown is not None), None) or (
                moved if isinstance(moved, Unknown) else None
            )
            if unknown is not None or self.taint is not None:
                self.cwd = self.taint or unknown
            return
        if name == "popd":
            self.cwd, self.at_launch = (
                self.pushed.pop()
                if self.pushed
                else (Unknown(f"`popd` at line {node.line} with no `pushd` before it"), False)
            )
            return
        if name in ("export", "declare", "typeset", "local", "readonly"):
            self.declaration(name, words[1:], node.line)
        elif name == "unset":
            for f in fields[1:]:
                if not f.text.startswith("-"):
                    self.vars.pop(f.text, None)
        elif name == "exit" and self.taint is None:
            raise _Exit(node.line)
        elif name in ("source", "."):
            shown = fields[1].text if len(fields) > 1 else ""
            self.note(node.line, f"`{name} {shown}` is not read; the variables it sets are unknown here")
        elif name == "eval":
            self.note(node.line, "`eval` is not run; what it would set is unknown here")
        elif name == "read":
            for f in fields[1:]:
                if _NAME.fullmatch(f.text):
                    self.vars[f.text] = Var("", Unknown(f"${f.text}, read from input at line {node.line}"), node.line)
        elif name == "shift":
            self.positional = self.positional[1:]
        elif name in self.functions and self.depth < 20:
            saved = self.positional
            self.positional = fields[1:]
            self.depth += 1
            try:
                self.node(self.functions[name].body)
            finally:
                self.depth -= 1
                self.positional = saved

    def declaration(self, name: str, words: list[Tok], line: int) -> None:
        for tok in words:
            if tok.kind == "word" and tok.text.startswith("-"):
                continue
            if tok.kind == "array" or _ASSIGN.match(tok.text):
                self.assignment(tok, exported=name == "export")
            elif tok.kind == "word":
                for f in self.expand(tok.text, tok.line):
                    if _NAME.fullmatch(f.text):
                        if f.text in self.vars:
                            self.vars[f.text].exported = name == "export" or self.vars[f.text].exported
                        elif name != "export":
                            self.vars[f.text] = Var("", self.taint, line)

    def assignment(self, tok: Tok, exported: bool = False) -> None:
        m = _ASSIGN.match(tok.text)
        assert m
        name, index, append = m.group(1), m.group(2), m.group(3) == "+"
        if tok.kind == "array":
            elements = [f for raw, line in tok.items for f in self.expand(raw, line)]
            if self.taint is not None:
                elements = [Field(f.text, f.line, f.unknown or self.taint) for f in elements]
            old = self.vars.get(name)
            base: list[Field] = []
            if append and old is not None:
                base = list(old.value) if isinstance(old.value, list) else [Field(old.value, old.line, old.unknown)]
            self.vars[name] = Var(base + elements, None, tok.line, exported)
            return
        raw = tok.text[m.end() :]
        fields = self.expand(raw, tok.line, split=False, assignment=True)
        value = fields[0] if fields else Field("", tok.line)
        unknown = self.taint or value.unknown
        if index:  # A[i]=v
            old = self.vars.get(name)
            items = list(old.value) if old is not None and isinstance(old.value, list) else []
            key = self.arith(index[1:-1], tok.line)
            if isinstance(key, int) and 0 <= key <= len(items) + 100:
                while len(items) <= key:
                    items.append(Field("", tok.line))
                items[key] = Field(value.text, tok.line, unknown)
                self.vars[name] = Var(items, None, tok.line)
            return
        old = self.vars.get(name)
        if append and old is not None:
            if isinstance(old.value, list):
                self.vars[name] = Var(old.value + [Field(value.text, tok.line, unknown)], None, tok.line)
                return
            unknown = unknown or old.unknown
            self.vars[name] = Var(old.value + value.text, unknown, tok.line, exported or old.exported)
            return
        self.vars[name] = Var(value.text, unknown, tok.line, exported)

    def assign(self, name: str, text: str, line: int) -> None:
        self.vars[name] = Var(text, self.taint, line)

    # -- expansion --
    def lookup(self, name: str, line: int) -> Var | None:
        if name in self.vars:
            return self.vars[name]
        if name.isdigit():
            n = int(name)
            if n == 0:
                return Var(self.script or self.src, None, line)
            return Var(self.positional[n - 1].text, None, line) if n <= len(self.positional) else None
        if name == "BASH_SOURCE" and self.script:
            return Var([Field(self.script, line)], None, line)
        if name == "PWD":  # bash sets PWD itself: the directory it is in
            return Var(*self.directory(line, "$PWD"), line)
        if name in self.env:
            value = self.env[name]
            self.note(line, f"${name} is not set in the script; taken from your environment ({value})")
            return Var(value, None, line)
        return None

    def directory(self, line: int, what: str) -> tuple[str, Unknown | None]:
        """The directory bash is in here (its value, or why it is unknown), noting where the launch directory came
        from."""
        if isinstance(self.cwd, Unknown):
            return "", self.cwd
        if self.at_launch:
            self.note(
                line,
                f"{what} is the directory the script is launched from, read as "
                + ("the script's own" if self.script else "yours")
                + f" ({self.cwd}); --env PWD=DIR reads it as launched from DIR",
            )
        return self.cwd, None

    def expand(self, raw: str, line: int, split: bool = True, assignment: bool = False) -> list[Field]:
        """One raw word -> the fields bash makes of it (quote removal, expansion, field splitting)."""
        parts = self.parts(raw, line, quoted=False)
        fields: list[Field] = []
        buf: list[str] = []
        exists = False
        unknown: Unknown | None = None
        field_line: int | None = None
        for part in parts:
            if part is _SPLICE:
                continue
            if part is _BREAK:
                fields.append(Field("".join(buf), field_line or line, unknown))
                buf, exists, unknown, field_line = [], False, None, None
                continue
            text, splittable, part_unknown, part_line, quoted = part
            if part_unknown is not None and unknown is None:
                unknown = part_unknown
            if part_line is not None and field_line is None:
                field_line = part_line
            if quoted:
                exists = True
            if splittable and split and not assignment and part_unknown is None:
                pieces = re.split(r"[ \t\n]+", text)
                for k, piece in enumerate(pieces):
                    if k > 0 and (buf or exists):
                        fields.append(Field("".join(buf), field_line or line, unknown))
                        buf, exists, unknown, field_line = [], False, part_unknown, part_line
                    if piece:
                        buf.append(piece)
                        exists = True
            else:
                buf.append(text)
                if text:
                    exists = True
        if buf or exists:
            fields.append(Field("".join(buf), field_line or line, unknown))
        if not split or assignment:
            return (
                [Field("".join(f.text for f in fields), line, next((f.unknown for f in fields if f.unknown), None))]
                if fields
                else []
            )
        return fields

    def parts(self, raw: str, line: int, quoted: bool) -> list[Any]:
        """(text, splittable, unknown, element line, quoted) pieces and _BREAK between spliced array elements."""
        out: list[Any] = []
        i = 0
        s = raw
        literal: list[str] = []

        def flush(q: bool = quoted) -> None:
            if literal:
                out.append(("".join(literal), False, None, None, q))
                literal.clear()

        while i < len(s):
            c = s[i]
            if c == "\\":
                nxt = s[i + 1] if i + 1 < len(s) else ""
                if quoted and nxt not in '$`"\\\n':
                    literal.append(c)
                    i += 1
                    continue
                if nxt != "\n":
                    literal.append(nxt)
                i += 2
                continue
            if c == "'" and not quoted:
                j = s.find("'", i + 1)
                j = len(s) if j < 0 else j
                literal.append(s[i + 1 : j])
                flush(True)
                out.append(("", False, None, None, True))
                i = j + 1
                continue
            if c == "$" and s.startswith("$'", i) and not quoted:
                j = i + 2
                buf = []
                while j < len(s) and s[j] != "'":
                    if s[j] == "\\" and j + 1 < len(s):
                        buf.append(
                            {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}.get(s[j + 1], "\\" + s[j + 1])
                        )
                        j += 2
                    else:
                        buf.append(s[j])
                        j += 1
                literal.append("".join(buf))
                flush(True)
                out.append(("", False, None, None, True))
                i = j + 1
                continue
            if c == '"' and not quoted:
                j = _match_double(s, i)
                flush()
                inner = self.parts(s[i + 1 : j], line, quoted=True)
                out += inner
                if _SPLICE not in inner:  # "" is a field even when empty; "${EMPTY[@]}" is none
                    out.append(("", False, None, None, True))
                i = j + 1
                continue
            if c == "`":
                j = s.find("`", i + 1)
                j = len(s) if j < 0 else j
                flush()
                out.append(self.substitution(s[i : j + 1], line, quoted))
                i = j + 1
                continue
            if c == "$" and i + 1 < len(s):
                j, piece = self.dollar(s, i, line, quoted)
                if piece is not None:
                    flush()
                    out += piece
                    i = j
                    continue
            literal.append(c)
            i += 1
        flush()
        return out

    def substitution(self, text: str, line: int, quoted: bool) -> tuple:
        body = text[2:-1] if text.startswith("$(") else re.sub(r"\\([$`\\])", r"\1", text[1:-1])
        value = self.evaluate(body, line)
        if isinstance(value, str):
            self.note(line, f"command substitution {text} evaluated as bash would: {value!r}")
            return (value, not quoted, None, None, quoted)
        self.note(line, f"command substitution {text} is not run; kept literally")
        return (
            text,
            False,
            value or Unknown(f"{text} (line {line}, a command substitution rlbridge import does not run)"),
            None,
            quoted,
        )

    # -- command substitutions rlbridge import evaluates --
    def evaluate(self, body: str, line: int) -> str | Unknown | None:
        """The output of `$(body)` when it is made only of the commands in _EVALUATED (run in a subshell: the
        script's directory is unchanged after it); Unknown when one of them fails here (a directory that is not
        on this machine); None when it runs anything else."""
        try:
            tree = Parser(Lexer(body, self.src).tokens(), self.src).program()
        except ShellError:
            return None
        if not tree:
            return None
        saved = self.cwd, self.at_launch
        out: list[str] = []
        try:
            for node in tree:
                if not isinstance(node, AndOr):
                    return None
                status = self.builtin(node.first, out, line)
                for op, other in node.rest:
                    if op == "|" or isinstance(status, Unknown):
                        return None if op == "|" else status
                    if status is (op == "&&"):
                        status = self.builtin(other, out, line)
                if isinstance(status, Unknown):
                    return status
        except _NotDeterministic:
            return None
        finally:
            self.cwd, self.at_launch = saved
        return "".join(out).rstrip("\n")

    def builtin(self, node: Any, out: list[str], line: int) -> bool | Unknown:
        """Run one command of _EVALUATED: its output appended to `out`; True, or Unknown when it fails here."""
        if not isinstance(node, Simple) or not node.words or node.words[0].kind != "word":
            raise _NotDeterministic
        if _ASSIGN.match(node.words[0].text):
            raise _NotDeterministic
        words = [f for tok in node.words if tok.kind == "word" for f in self.expand(tok.text, tok.line)]
        if not words or words[0].text not in _EVALUATED:
            raise _NotDeterministic
        unknown = next((w.unknown for w in words if w.unknown is not None), None)
        if unknown is not None:
            return unknown
        name, args = words[0].text, [w.text for w in words[1:]]
        if any(_redirects_stdout(r) for r in node.redirs):
            out = []  # stdout redirected away: nothing captured
        if name == "cd":
            return self.change_directory(args, line)
        if name in ("true", ":"):
            return True
        result = self.output(name, args, line)
        if isinstance(result, Unknown):
            return result
        out.append(result)
        return True

    def output(self, name: str, args: list[str], line: int) -> str | Unknown:
        """What pwd, dirname, basename, realpath, readlink -f and echo print (bash's and coreutils' rules)."""
        opts, operands = _options(args) if name != "echo" else ([], args)
        if name == "pwd":
            cwd, unknown = self.directory(line, "`pwd`")
            if unknown is not None:
                return unknown
            return (os.path.realpath(cwd) if "-P" in opts else cwd) + "\n"
        if name == "dirname":
            return "".join(_dirname(a) + "\n" for a in operands)
        if name == "basename":
            suffix, names, rest = None, False, list(args)
            while rest and rest[0].startswith("-") and rest[0] != "-":
                flag = rest.pop(0)
                if flag == "--":
                    break
                if flag in ("-s", "--suffix") and rest:
                    suffix, names = rest.pop(0), True
                elif flag.startswith(("-s", "--suffix=")):
                    suffix, names = flag.split("=", 1)[-1] if "=" in flag else flag[2:], True
                elif flag in ("-a", "--multiple"):
                    names = True
                else:
                    raise _NotDeterministic
            if not names and len(rest) == 2:
                rest, suffix = rest[:1], rest[1]
            return "".join(_basename(a, suffix or "") + "\n" for a in rest)
        if name == "echo":
            newline = True
            while operands and operands[0] in ("-n", "-E"):
                newline = newline and operands[0] != "-n"
                operands = operands[1:]
            if operands and operands[0].startswith("-e"):
                raise _NotDeterministic  # escapes: not read
            return " ".join(operands) + ("\n" if newline else "")
        # realpath, readlink: canonical paths, resolved against this machine's file system
        if name == "readlink" and not {"-f", "-e", "-m"} & set(opts):
            raise _NotDeterministic  # plain readlink prints a link's target
        if any(o.startswith("--relative") for o in opts):
            raise _NotDeterministic
        lines = []
        for operand in operands:
            base, unknown = self.directory(line, f"`{name} {operand}`") if not operand.startswith("/") else ("/", None)
            if unknown is not None:
                return unknown
            path = os.path.join(base, operand)
            resolved = _normalize(path) if "-s" in opts or "--no-symlinks" in opts else os.path.realpath(path)
            missing = (
                not os.path.exists(resolved)
                if "-e" in opts
                else (not os.path.isdir(os.path.dirname(resolved)) if "-m" not in opts else False)
            )
            if missing:
                return Unknown(f"`{name} {operand}` (line {line}): {path} is not on this machine")
            lines.append(resolved + "\n")
        return "".join(lines)

    def change_directory(self, args: list[str], line: int) -> bool | Unknown:
        """`cd [-L|-P] [DIR]` as bash does it (logical: `..` removes the previous component): True, or Unknown
        when DIR is not a directory on this machine."""
        opts, operands = _options(args)
        target = operands[0] if operands else self.env.get("HOME", "")
        if target == "-" or not target:
            raise _NotDeterministic
        if target.startswith("/"):
            path = target
        else:
            base, unknown = self.directory(line, f"`cd {target}`")
            if unknown is not None:
                return unknown
            path = base.rstrip("/") + "/" + target
        new = os.path.realpath(path) if "-P" in opts else _normalize(path)
        if not os.path.isdir(new):
            return Unknown(f"`cd {target}` (line {line}): {new} is not a directory on this machine")
        self.cwd, self.at_launch = new, False
        return True

    def dollar(self, s: str, i: int, line: int, quoted: bool) -> tuple[int, list[Any] | None]:
        if s.startswith("$((", i):
            j = _match_group(s, i + 1, "(", ")")
            value = self.arith(s[i + 3 : j - 1], line)
            if isinstance(value, Unknown):
                return j + 1, [(s[i : j + 1], False, value, None, quoted)]
            return j + 1, [(str(value), not quoted, None, None, quoted)]
        if s.startswith("$(", i):
            j = _match_group(s, i + 1, "(", ")")
            return j + 1, [self.substitution(s[i : j + 1], line, quoted)]
        if s.startswith("${", i):
            j = _match_group(s, i + 1, "{", "}")
            return j + 1, self.brace(s[i + 2 : j], line, quoted, s[i : j + 1])
        m = _NAME.match(s, i + 1)
        if m:
            return m.end(), self.value_parts(m.group(0), line, quoted, s[i : m.end()])
        c = s[i + 1]
        if c.isdigit():
            return i + 2, self.value_parts(c, line, quoted, s[i : i + 2])
        if c in "@*":
            self.note(line, f"${c} (arguments passed to the script) is empty here")
            return i + 2, self.array_parts(self.positional, quoted, c == "@")
        if c == "#":
            return i + 2, [(str(len(self.positional)), False, None, None, quoted)]
        if c in "?$!-":
            return i + 2, [(s[i : i + 2], False, Unknown(f"{s[i : i + 2]} (a runtime value)"), None, quoted)]
        return i + 1, None

    def value_parts(self, name: str, line: int, quoted: bool, shown: str) -> list[Any]:
        var = self.lookup(name, line)
        if var is None:
            self.note(line, f"{shown} is not set in the script or your environment; empty, as in bash")
            return [("", not quoted, None, None, quoted)]
        if isinstance(var.value, list):  # $ARR is its first element
            first = var.value[0] if var.value else Field("", line)
            return [(first.text, not quoted, first.unknown, None, quoted)]
        return [(var.value, not quoted, var.unknown, None, quoted)]

    @staticmethod
    def array_parts(items: list[Field], quoted: bool, at: bool) -> list[Any]:
        if quoted and at:  # "${A[@]}": one field per element
            out: list[Any] = [_SPLICE]
            for k, f in enumerate(items):
                if k:
                    out.append(_BREAK)
                out.append((f.text, False, f.unknown, f.line, True))
            return out
        if quoted:  # "${A[*]}", "$*": one word
            return [
                (
                    " ".join(f.text for f in items),
                    False,
                    next((f.unknown for f in items if f.unknown), None),
                    items[0].line if items else None,
                    True,
                )
            ]
        out = []
        for k, f in enumerate(items):  # unquoted: each element split on its own
            if k:
                out.append((" ", True, None, None, False))
            out.append((f.text, f.unknown is None, f.unknown, f.line, False))
        return out

    _BRACE = re.compile(r"^(#?)(!?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!])(\[([^\]]*)\])?(.*)$", re.S)

    def brace(self, body: str, line: int, quoted: bool, shown: str) -> list[Any]:
        m = self._BRACE.match(body)
        if not m:
            return [
                (
                    shown,
                    False,
                    Unknown(f"{shown} (line {line}, an expansion rlbridge import does not read)"),
                    None,
                    quoted,
                )
            ]
        length, indirect, name, subscript, index, rest = (
            m.group(1),
            m.group(2),
            m.group(3),
            m.group(4),
            m.group(5),
            m.group(6),
        )
        if name in "@*" and len(name) == 1:
            if length:
                return [(str(len(self.positional)), False, None, None, quoted)]
            return self.array_parts(self.positional, quoted, name == "@")
        if indirect:
            target = self.lookup(name, line)
            name = (
                target.value
                if target is not None and isinstance(target.value, str) and _NAME.fullmatch(target.value)
                else ""
            )
            if not name:
                return [
                    (
                        shown,
                        False,
                        Unknown(f"{shown} (line {line}, an indirect expansion of an unknown name)"),
                        None,
                        quoted,
                    )
                ]
        var = self.lookup(name, line)
        if length:
            if var is None:
                return [("0", False, None, None, quoted)]
            if isinstance(var.value, list) and index in ("@", "*"):
                return [(str(len(var.value)), False, None, None, quoted)]
            return [
                (
                    str(len(var.value if isinstance(var.value, str) else (var.value[0].text if var.value else ""))),
                    False,
                    var.unknown,
                    None,
                    quoted,
                )
            ]
        if subscript and index in ("@", "*"):
            items = (
                var.value
                if var is not None and isinstance(var.value, list)
                else ([Field(var.value, var.line, var.unknown)] if var is not None and var.value != "" else [])
            )
            if rest:
                return [
                    (
                        shown,
                        False,
                        Unknown(f"{shown} (line {line}, an array expansion rlbridge import does not read)"),
                        None,
                        quoted,
                    )
                ]
            return self.array_parts(items, quoted, index == "@")
        value: str | None
        unknown: Unknown | None = None
        if var is None:
            value = None
        elif isinstance(var.value, list):
            k = self.arith(index, line) if subscript else 0
            if isinstance(k, Unknown):
                return [(shown, False, k, None, quoted)]
            value = var.value[k].text if -len(var.value) <= k < len(var.value) else None
            unknown = var.value[k].unknown if value is not None else None
        else:
            value, unknown = (var.value, var.unknown) if not subscript or index in ("0", "") else (None, None)
        if not rest:
            if value is None:
                self.note(line, f"{shown} is not set in the script or your environment; empty, as in bash")
                value = ""
            return [(value, not quoted, unknown, None, quoted)]
        op_match = re.match(r"^(:?[-=+?])(.*)$", rest, re.S)
        if op_match:
            op, word = op_match.group(1), op_match.group(2)
            unset = value is None or (op.startswith(":") and value == "" and unknown is None)
            kind = op[-1]
            if kind in "-=":
                if not unset:
                    return [(value, not quoted, unknown, None, quoted)]
                parts = self.operand(word, line, quoted)
                if kind == "=":
                    text = "".join(p[0] for p in parts if p is not _BREAK and p is not _SPLICE)
                    why = next((p[2] for p in parts if p is not _BREAK and p is not _SPLICE and p[2] is not None), None)
                    self.vars[name] = Var(text, self.taint or why, line)
                return parts
            if kind == "+":
                return [] if unset else self.operand(word, line, quoted)
            if unset:  # ${A:?message}
                raise self.fail(
                    line, f"{shown}: ${name} is not set, and the script stops here; set {name} in your environment"
                )
            return [(value, not quoted, unknown, None, quoted)]
        if value is None:
            value = ""
        if unknown is not None:
            return [(shown, False, unknown, None, quoted)]
        substring = re.match(r"^:(-?\s*[^:]*)(?::(.*))?$", rest, re.S)
        if substring and not rest.startswith(":-"):
            offset = self.arith(substring.group(1), line)
            count = self.arith(substring.group(2), line) if substring.group(2) is not None else None
            if isinstance(offset, Unknown) or isinstance(count, Unknown):
                return [(shown, False, offset if isinstance(offset, Unknown) else count, None, quoted)]
            start = offset if offset >= 0 else max(len(value) + offset, 0)
            end = len(value) if count is None else (start + count if count >= 0 else len(value) + count)
            return [(value[start:end], not quoted, None, None, quoted)]
        for op in ("##", "#", "%%", "%"):
            if rest.startswith(op):
                pattern = self.pattern(rest[len(op) :], line)
                if isinstance(pattern, Unknown):
                    return [(shown, False, pattern, None, quoted)]
                return [(_trim(value, pattern, op), not quoted, None, None, quoted)]
        if rest.startswith("/"):
            every = rest.startswith("//")
            body_ = rest[2:] if every else rest[1:]
            pat, _, rep = body_.partition("/")
            pattern = self.pattern(pat, line)
            replacement = "".join(p[0] for p in self.operand(rep, line, True) if p is not _BREAK and p is not _SPLICE)
            if isinstance(pattern, Unknown):
                return [(shown, False, pattern, None, quoted)]
            regex = _glob_regex(pattern)
            return [
                (re.sub(regex, lambda _: replacement, value, count=0 if every else 1), not quoted, None, None, quoted)
            ]
        if rest in (",,", "^^", ",", "^"):
            converted = (
                value.lower()
                if rest == ",,"
                else value.upper()
                if rest == "^^"
                else (value[:1].lower() + value[1:])
                if rest == ","
                else (value[:1].upper() + value[1:])
            )
            return [(converted, not quoted, None, None, quoted)]
        return [
            (shown, False, Unknown(f"{shown} (line {line}, an expansion rlbridge import does not read)"), None, quoted)
        ]

    def operand(self, word: str, line: int, quoted: bool) -> list[Any]:
        """The word of ${A:-word}: expanded recursively (nested defaults), quotes inside it honoured."""
        return self.parts(word, line, quoted)

    def pattern(self, raw: str, line: int) -> str | Unknown:
        parts = self.parts(raw, line, quoted=False)
        out = []
        for p in parts:
            if p is _BREAK or p is _SPLICE:
                continue
            text, _, unknown, _, quoted = p
            if unknown is not None:
                return unknown
            out.append(re.sub(r"([*?\[\]])", r"[\1]", text) if quoted and text else text)
        return "".join(out)

    def arith(self, expr: str | None, line: int) -> int | Unknown:
        """bash arithmetic on integers: + - * / % ** << >> & | ^, comparisons, ?:, variables by name."""
        if expr is None:
            return 0
        parts = self.parts(expr, line, quoted=True)
        unknown = next((p[2] for p in parts if p is not _BREAK and p is not _SPLICE and p[2] is not None), None)
        if unknown is not None:
            return unknown
        text = "".join(p[0] for p in parts if p is not _BREAK and p is not _SPLICE).strip()
        if not text:
            return 0
        return _evaluate_arith(text, self, line)


def _match_double(s: str, i: int) -> int:
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j
        if c == "$" and s.startswith("$(", j):
            j = _match_group(s, j + 1, "(", ")") + 1
            continue
        if c == "$" and s.startswith("${", j):
            j = _match_group(s, j + 1, "{", "}") + 1
            continue
        if c == "`":
            k = s.find("`", j + 1)
            j = len(s) if k < 0 else k + 1
            continue
        j += 1
    return len(s)


def _match_group(s: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at s[i] (quotes and nested groups respected)."""
    depth = 0
    j = i
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and open_ == "(":
            k = s.find("'", j + 1)
            j = len(s) if k < 0 else k + 1
            continue
        if c == '"':
            j = _match_double(s, j) + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return len(s) - 1


def _glob_regex(pattern: str) -> str:
    return fnmatch.translate(pattern).removesuffix(r"\Z").removeprefix("(?s:").removesuffix(")")


def _trim(value: str, pattern: str, op: str) -> str:
    regex = re.compile(_glob_regex(pattern), re.S)
    cuts = range(len(value) + 1)
    if op in ("#", "##"):
        order = cuts if op == "#" else reversed(cuts)
        for k in order:
            if regex.fullmatch(value[:k]):
                return value[k:]
        return value
    order = reversed(cuts) if op == "%" else cuts
    for k in order:
        if regex.fullmatch(value[k:]):
            return value[:k]
    return value


def _redirects_stdout(redir: Tok) -> bool:
    """Whether a redirection sends a command's standard output elsewhere (`>f`, `1>>f`, `&>f`, `>&2`)."""
    m = Lexer._REDIR.fullmatch(redir.text)
    if not m or m.group(1) not in ("", "1", "&") or m.group(2) not in (">", ">>", ">|", ">&"):
        return False
    return not (m.group(2) == ">&" and redir.items and redir.items[0][0] == "1")


def _options(args: list[str]) -> tuple[list[str], list[str]]:
    """A coreutils command's options (up to `--` or the first operand) and its operands."""
    for k, arg in enumerate(args):
        if arg == "--":
            return args[:k], args[k + 1 :]
        if not arg.startswith("-") or arg == "-":
            return args[:k], args[k:]
    return args, []


def _normalize(path: str) -> str:
    """A path with `.`, `..` and repeated slashes removed lexically, as bash's logical `cd` and `pwd` keep it."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _dirname(path: str) -> str:
    """POSIX dirname: the path without its last component (`.` when there is none)."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/" if path else "."
    if "/" not in stripped:
        return "."
    head = stripped[: stripped.rindex("/")].rstrip("/")
    return head or "/"


def _basename(path: str, suffix: str = "") -> str:
    """POSIX basename: the last component, without `suffix` unless it is the whole component."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/" if path else ""
    base = stripped.rsplit("/", 1)[-1]
    return base[: -len(suffix)] if suffix and base.endswith(suffix) and base != suffix else base


def _evaluate_arith(text: str, interp: Interpreter, line: int) -> int | Unknown:
    import ast

    py = text.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"(?<![=!<>])!(?!=)", " not ", py)
    py = re.sub(r"\?(.*?):", lambda m: f" if_({m.group(1)}) else ", py) if "?" in py else py
    try:
        tree = ast.parse(py, mode="eval")
    except SyntaxError:
        return Unknown(f"$(({text})) (line {line}, arithmetic rlbridge import does not read)")

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            var = interp.lookup(node.id, line)
            raw = (
                ""
                if var is None
                else (var.value if isinstance(var.value, str) else (var.value[0].text if var.value else ""))
            )
            if var is not None and var.unknown is not None:
                raise _ArithUnknown(var.unknown)
            raw = raw.strip()
            if raw == "":
                return 0
            if re.fullmatch(r"-?\d+", raw):
                return int(raw)
            if _NAME.fullmatch(raw):
                return value(ast.Name(raw))
            raise _ArithUnknown(Unknown(f"${node.id}={raw!r} in $(({text})) (line {line}, not an integer)"))
        if isinstance(node, ast.UnaryOp):
            v = value(node.operand)
            return {ast.USub: -v, ast.UAdd: v, ast.Invert: ~v, ast.Not: int(not v)}[type(node.op)]
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            op = type(node.op)
            if op in (ast.Div, ast.FloorDiv, ast.Mod) and b == 0:
                raise _ArithUnknown(Unknown(f"$(({text})) (line {line}, division by zero)"))
            if op is ast.Div or op is ast.FloorDiv:
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if op is ast.Mod:
                r = abs(a) % abs(b)
                return r if a >= 0 else -r
            if op is ast.Pow and (b < 0 or b > 64):
                raise _ArithUnknown(Unknown(f"$(({text})) (line {line}, exponent out of range)"))
            if op in (ast.LShift, ast.RShift) and not 0 <= b <= 64:
                raise _ArithUnknown(Unknown(f"$(({text})) (line {line}, shift out of range)"))
            ops = {
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
                ast.Pow: lambda: a**b,
                ast.LShift: lambda: a << b,
                ast.RShift: lambda: a >> b,
                ast.BitAnd: lambda: a & b,
                ast.BitOr: lambda: a | b,
                ast.BitXor: lambda: a ^ b,
            }
            if op not in ops:
                raise _ArithUnknown(Unknown(f"$(({text})) (line {line}, arithmetic rlbridge import does not read)"))
            return ops[op]()
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = value(node.left), value(node.comparators[0])
            cmp = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b, ast.NotEq: a != b}
            return int(cmp[type(node.ops[0])]) if type(node.ops[0]) in cmp else 0
        if isinstance(node, ast.BoolOp):
            vals = [value(v) for v in node.values]
            return int(all(vals)) if isinstance(node.op, ast.And) else int(any(vals))
        if isinstance(node, ast.IfExp) and isinstance(node.test, ast.Call):
            return value(node.body) if value(node.test.args[0]) else value(node.orelse)
        raise _ArithUnknown(Unknown(f"$(({text})) (line {line}, arithmetic rlbridge import does not read)"))

    try:
        return value(tree)
    except _ArithUnknown as exc:
        return exc.unknown
    except (KeyError, IndexError, RecursionError, OverflowError, AttributeError):
        return Unknown(f"$(({text})) (line {line}, arithmetic rlbridge import does not read)")


class _ArithUnknown(Exception):
    def __init__(self, unknown: Unknown):
        self.unknown = unknown


# --- entry point ------------------------------------------------------------------------------


@dataclass
class Found:
    """The launch command: its words up to and including the marker, its arguments (each with the line
    it was written on, spliced array elements with their own line), the script's variables at that
    point, and notes on what was not taken literally."""

    words: list[Field]
    args: list[Field]
    line: int
    variables: dict[str, str]
    notes: list[tuple[int | None, str]]


def read_launch(
    text: str,
    source: str,
    is_launch: Callable[[str], bool],
    what: str,
    environ: dict[str, str] | None = None,
    script: str | None = None,
    cwd: str | None = None,
) -> Found:
    """Read `text` (a script or a command line) statically and return the first launch command. `script` is
    the script file's real path (`$0`; the directory it is read from, unless `cwd` names another)."""
    if "\x00" in text:
        raise ShellError(
            f"{source}:1: not a shell script (binary data); rlbridge import reads a launch script, a command line "
            "or a config file"
        )
    toks = Lexer(text, source).tokens()
    tree = Parser(toks, source).program()
    interp = Interpreter(source, is_launch, environ, script, cwd)
    try:
        launch = interp.run(tree)
    except _Exit as stop:
        raise ShellError(
            f"{source}:{stop.line}: the script exits here before its {what} command; "
            "set the variables its conditions test (in your environment) or import the command line itself"
        ) from None
    if launch is None:
        raise ShellError(f"{source}: no {what} command found; rlbridge import reads the launch command of a recipe")
    args = [f for f in launch.words[launch.marker + 1 :]]
    for f in args:
        if f.unknown is not None and f.unknown.branch:
            raise ShellError(
                f"{source}:{f.line}: {f.text!r} depends on {f.unknown.reason}; set the variables that "
                "branch tests (`rlbridge import --env NAME=VALUE`, or your environment) so the launch command "
                "can be read"
            )
    variables = {
        k: (v.value if isinstance(v.value, str) else " ".join(x.text for x in v.value)) for k, v in interp.vars.items()
    }
    return Found(launch.words[: launch.marker + 1], args, launch.line, variables, interp.notes)
