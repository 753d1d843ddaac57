"""Issue 45's measure: of the settings of the engines' own example scripts (tests/fixtures/recipes/measure/, vendored
with their source in SOURCE.md), the share `plan(import(recipe))` reproduces, against the values bash itself gives
them (scripts/recipe_coverage.py, the command docs/import.md reports). None may be silent: reported as reproduced
(mapped, same, option, reward, sink) while the plan or the config holds another value; every loss has its reason."""

import importlib.util
import sys
from pathlib import Path

import pytest

from rlbridge.contract.registry import get_plugin_manager

pytest.importorskip("hydra", reason="rlbridge[import] (hydra-core) parses verl's Hydra overrides")

REPO = Path(__file__).resolve().parents[1]
MEASURE = REPO / "tests" / "fixtures" / "recipes" / "measure"


def _coverage():
    spec = importlib.util.spec_from_file_location("recipe_coverage", REPO / "scripts" / "recipe_coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _check(measured) -> None:
    assert not measured.error, measured.error
    silent = [
        f"{r.key}={r.value!r} (line {r.line}): {r.kind}, planned {r.planned!r}"
        for r in measured.rows
        if r.verdict == "silent"
    ]
    assert not silent, "reported as reproduced, planned differently:\n" + "\n".join(silent)
    for row in measured.rows:
        assert row.verdict in ("reproduced", "lost"), row
        if row.verdict == "lost":
            assert row.detail and row.line, row  # named in the import report, with its line


# one script per engine in CI (the self-locating paths, the flat OpenRLHF spelling, the W&B key, a hub dataset; verl's
# two data files and its tracker); every one in `make compat`
IN_CI = ("openrlhf/train_prorlv2_math_hybrid_engine_0.9.10.sh", "verl/rloo_qwen3_8b_fsdp.sh")


@pytest.mark.parametrize("name", IN_CI)
def test_an_example_script_imports_with_nothing_silent(name):
    coverage = _coverage()
    measured = coverage.measure(MEASURE / name, dict(coverage.ENV))
    _check(measured)
    assert measured.count("reproduced") >= 0.95 * len(measured.rows), [r for r in measured.rows if r.verdict == "lost"]


@pytest.mark.matrix_only  # 22 imports, ~10 min on 2 cores
def test_the_engines_example_scripts_are_reproduced_at_95_percent():
    coverage = _coverage()
    results = [coverage.measure(recipe, dict(coverage.ENV)) for recipe in coverage.recipes_in([str(MEASURE)])]
    # the backends whose example scripts are vendored here, a folder each (measure/<backend>/)
    vendored = {folder.name for folder in MEASURE.iterdir() if folder.is_dir()}
    assert vendored <= set(get_plugin_manager().items["backend"]), vendored
    assert {m.engine for m in results} == vendored
    for engine in vendored:
        assert sum(m.engine == engine for m in results) >= 5, engine
    for measured in results:
        _check(measured)
    total = sum(len(m.rows) for m in results)
    assert sum(m.count("reproduced") for m in results) >= 0.95 * total
