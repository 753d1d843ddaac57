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
from dataclasses import dataclass
from typing import Any, Callable

from rlbridge.importer.shell_expansion import (
    Field,
    ShellExpansion,
    Unknown,
    Var,
    _NotDeterministic,
)
from rlbridge.importer.shell_syntax import (
    _ASSIGN,
    _NAME,
    AndOr,
    Case,
    For,
    Function,
    Group,
    If,
    Lexer,
    Loop,
    Parser,
    ShellError,
    Simple,
    Tok,
)

_MAX_STEPS = 200_000  # interpreter steps (loop iterations, function calls): a script is not a program to run
_MAX_ITERATIONS = 1000
_TESTS = {"[", "[[", "test", "true", "false", ":", "!"}


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


class Interpreter(ShellExpansion):
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
