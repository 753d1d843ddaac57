"""Engine knowledge lives in the adapters (issue 31): outside adapters/<engine>/, the core (rlbridge/)
and the built-in plugins (plugins/) name an engine in code only in the files listed here, each with
why. Prose does not count (comments, docstrings, the documentation strings under attributes); code
does: identifiers and every other string, error messages included. The engines are the in-tree
backends, found through the `rlbridge` entry points. A file that stops naming an engine must leave the
list, so the list only shrinks: adding an engine touches its own folder, not these files."""

import ast
import io
import re
import tokenize

from tests.conftest import REPO

# file -> why it still names engines (what would move it into the adapters)
ALLOWED = {
    "rlbridge/contract/config.py": "the default backend (backend: trl)",
    "rlbridge/cli.py": "the product's one-line description and examples in --help texts",
    "rlbridge/bench/arms.py": "examples in arm-parsing error messages",
    "rlbridge/contract/metrics.py": "metric descriptions that name where engines report them",
    "rlbridge/testing/suite.py": "the kill-and-resume test's slow reward is a native TRL-convention function",
}


CODE_TOKENS = {
    tokenize.NAME,
    tokenize.STRING,
    getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING),
}  # 3.12 splits f-strings


def _engines() -> set[str]:
    from tests.conftest import in_tree_backends

    return set(in_tree_backends())


def _names_an_engine_in_code(path, pattern) -> bool:
    source = path.read_text()
    prose = {
        line
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for line in range(node.lineno, node.end_lineno + 1)
    }
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start[0] in prose):
            continue
        if token.type in CODE_TOKENS and pattern.search(token.string):
            return True
    return False


def test_engine_names_outside_the_adapters_are_on_the_allow_list():
    engines = _engines()
    adapters = {path.parent.name for path in (REPO / "adapters").glob("*/backend.py")}
    assert adapters <= engines  # (the probe finds the in-tree adapters)
    pattern = re.compile(rf"(?<![A-Za-z0-9])({'|'.join(sorted(engines))})(?![A-Za-z0-9])", re.IGNORECASE)
    naming = {
        str(p.relative_to(REPO))
        for folder in ("rlbridge", "plugins")
        for p in (REPO / folder).rglob("*.py")
        if _names_an_engine_in_code(p, pattern)
    }
    unlisted = sorted(naming - set(ALLOWED))
    assert not unlisted, f"these files name an engine in code; move that knowledge into adapters/<engine>/: {unlisted}"
    gone = sorted(set(ALLOWED) - naming)
    assert not gone, f"these files no longer name an engine: remove them from ALLOWED in {__name__}: {gone}"
