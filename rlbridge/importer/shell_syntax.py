"""The launch-script reader's syntax: bash's lexer (quotes, `$(...)`, `${...}`, `$((...))`, heredocs,
redirections such as `2>&1`, `>&2`, `&>>`, job control `&`) and parser (commands, `if`/`elif`, `case`,
`for`, `while`, `{ }`, `( )` and functions). What the words mean is rlbridge.importer.shell_expansion's and
rlbridge.importer.shell_reader's; nothing is executed. Every lexer step consumes input, so no input makes it loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlbridge.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_RESERVED_START = {"if", "for", "while", "until", "case", "{", "(", "function", "select"}


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
