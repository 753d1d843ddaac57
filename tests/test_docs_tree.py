"""Docs that cannot drift (issue 31): docs/architecture.md's tree names every module of the core and
every file an in-tree adapter has, and nothing that does not exist; docs/contributing.md's checklist
for a new adapter names every file all in-tree adapters have."""

import re
import subprocess

from tests.conftest import REPO

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.py|\.md|/)")


def _tracked(folder: str) -> list[str]:
    """The files git tracks under `folder` (outside a git checkout: every file but caches)."""
    res = subprocess.run(["git", "ls-files", folder], cwd=REPO, capture_output=True, text=True)
    if res.returncode == 0:
        return res.stdout.split()
    return [
        str(p.relative_to(REPO)) for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]


def _tree() -> tuple[set[str], set[str]]:
    """(core paths, adapter entries) the architecture tree names: core paths relative to the
    repository ('rlbridge/run/runner.py', 'rlbridge/run/'), adapter entries relative to the adapter."""
    block = (REPO / "docs" / "architecture.md").read_text().split("```")[1]
    core, adapter = set(), set()
    stack: list[tuple[int, str]] = []
    section = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if indent == 0:
            section, stack = head, [(0, head)]
            continue
        if section == "adapters/<engine>/":
            named = (
                NAME.findall(line)
                if head.startswith("(") or not NAME.fullmatch(head.split(",")[0])
                else [n.strip() for n in head.split(",")]
            )
            adapter.update(named)
        elif section == "rlbridge/":
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = "".join(d for _, d in stack)
            for name in (n.strip() for n in head.split(",")):
                core.add(parent + name)
                if name.endswith("/"):
                    stack.append((indent, name))
    return core, adapter


def test_architecture_tree_names_every_core_module_and_nothing_else():
    core, _ = _tree()
    modules = {p for p in _tracked("rlbridge") if p.endswith(".py") and not p.endswith("__init__.py")}
    named_modules = {p for p in core if p.endswith(".py")}
    missing = sorted(modules - named_modules)
    assert not missing, f"docs/architecture.md's tree does not name these modules (add a line each): {missing}"
    stale = sorted(p for p in core if not (REPO / p).exists())
    assert not stale, f"docs/architecture.md's tree names what does not exist: {stale}"


def _adapter_entries() -> dict[str, set[str]]:
    entries: dict[str, set[str]] = {}
    for path in _tracked("adapters"):
        parts = path.split("/")
        if len(parts) >= 3:
            entries.setdefault(parts[1], set()).add(parts[2] + ("/" if len(parts) > 3 else ""))
    return {engine: names - {"__init__.py"} for engine, names in entries.items()}


def _in_tree_backends() -> set[str]:
    from tests.conftest import in_tree_backends

    return set(in_tree_backends())


def test_architecture_tree_names_every_adapter_file():
    _, named = _tree()
    entries = _adapter_entries()
    assert _in_tree_backends() <= set(entries)  # (every adapter rlbridge ships is read)
    have = set().union(*entries.values())
    assert not sorted(have - named), f"docs/architecture.md's adapters/<engine>/ part misses {sorted(have - named)}"
    assert not sorted(named - have), (
        f"docs/architecture.md's adapters/<engine>/ part names what no adapter has: {sorted(named - have)}"
    )


def test_contributing_checklist_names_every_file_each_adapter_has():
    text = (REPO / "docs" / "contributing.md").read_text()
    section = text.split("## Add an adapter", 1)[1].split("\n## ", 1)[0]
    common = set.intersection(*_adapter_entries().values())
    named = set(NAME.findall(section))
    assert not sorted(common - named), f"docs/contributing.md's adapter checklist misses {sorted(common - named)}"


def test_each_adapter_is_documented_in_its_own_folder():
    """An adapter's documentation is adapters/<engine>/README.md, not a docs/<engine>.md: adding an engine
    touches its folder plus the six files docs/contributing.md names, and no page under docs/."""
    entries = _adapter_entries()
    undocumented = sorted(engine for engine, names in entries.items() if "README.md" not in names)
    assert not undocumented, f"these adapters have no README.md in their folder: {undocumented}"
    in_docs = sorted(f"docs/{engine}.md" for engine in entries if (REPO / "docs" / f"{engine}.md").exists())
    assert not in_docs, f"move these into adapters/<engine>/README.md (git mv) and fix their links: {in_docs}"
    section = (REPO / "docs" / "contributing.md").read_text().split("## Add an adapter", 1)[1]
    assert "an engine touches six files" in section, "docs/contributing.md no longer says which six files"
