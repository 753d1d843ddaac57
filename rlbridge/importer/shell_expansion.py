"""The launch-script reader's expansion: what a word expands to (parameter expansions, arrays spliced one
word per element, arithmetic `$((...))`, and command substitutions made only of `cd`, `pwd`, `dirname`,
`basename`, `realpath`, `readlink -f` and `echo`, evaluated as bash would on this machine's directories), or
Unknown with the reason it cannot be known without running the script.

ShellExpansion is the expanding half of rlbridge.importer.shell_reader's Interpreter (its base class): it
reads the interpreter's state (variables, positional arguments, the current directory, the taint of an
undecided branch) and reports through its note/fail/step.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import Any

from rlbridge.importer.shell_syntax import _ASSIGN, _NAME, AndOr, Lexer, Parser, ShellError, Simple, Tok

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


_BREAK = object()
_SPLICE = object()  # marks a "${A[@]}" splice (an empty array makes no field)


class _NotDeterministic(Exception):
    """A command substitution that is not made only of the commands rlbridge import evaluates."""


# commands whose output depends only on their arguments and this machine's directories: a command
# substitution made of these is evaluated (ShellExpansion.evaluate); any other is unknown
_EVALUATED = {"cd", "pwd", "dirname", "basename", "realpath", "readlink", "echo", "true", ":"}


class ShellExpansion:
    """Expands words against the state of the Interpreter that subclasses it (rlbridge.importer.shell_reader)."""

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


def _evaluate_arith(text: str, interp: ShellExpansion, line: int) -> int | Unknown:
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
