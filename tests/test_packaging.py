"""What a non-editable install ships: every package of the core, the adapters and the plugins is listed in
pyproject.toml's `[tool.setuptools] packages` (a package missing there installs from a checkout with
`pip install -e .` and is absent from the wheel: rlbridge.importer was, and `rlbridge import` failed there)."""

import tomllib

from tests.conftest import REPO


def _declared() -> tuple[set[str], dict[str, str]]:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(setuptools["packages"]), setuptools["package-dir"]


def test_every_package_in_the_tree_is_in_the_wheel():
    declared, package_dir = _declared()
    found = set()
    for name, folder in package_dir.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            if "tests" in relative.parts or "__pycache__" in relative.parts:
                continue  # an adapter's own tests are not installed
            found.add(".".join((name, *relative.parts)))
    assert found - declared == set(), (
        f"add these to pyproject.toml [tool.setuptools] packages: {sorted(found - declared)}"
    )
    assert declared - found == set(), f"pyproject.toml lists packages the tree lacks: {sorted(declared - found)}"


def test_the_rlbridge_found_from_the_repository_root_is_the_installed_one():
    """`pip install -e .` writes rlbridge.egg-info to .editable-metadata (setup.cfg), not the root: the root is on
    sys.path in every test run, where an egg-info an engine environment's install rewrites while the suite runs
    would hide the installed distribution's entry points (a test once found no backend at all)."""
    import subprocess
    import sys

    where = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.distribution('rlbridge')._path)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (REPO / where).resolve().parent != REPO, (
        f"{where}: rlbridge's metadata in the repository root shadows the installed one; remove it "
        "(`rm -rf rlbridge.egg-info`): setup.cfg sends it to .editable-metadata"
    )
