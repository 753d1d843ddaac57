"""How much of real engine recipes `plan(import(recipe))` reproduces (issue 45), and how much of them the canonical
config expresses at all (issue 17).

For every recipe (default: tests/fixtures/recipes/measure/, the engines' own example scripts that no other fixture
holds, see SOURCE.md there), it imports the recipe in this process (`rlbridge import RECIPE --from ENGINE`, the
recipe's own rewards kept), plans the written config with the adapter and compares, setting by setting, with the
recipe's true values:

* a launch script's true values are what bash passes: bash runs the script with the launch command replaced by a
  function that records its argv (tests/fixtures/recipes/real/bash_oracle.sh; nothing is launched), and the
  adapter's reader reads that argv as a command line; a Python or YAML recipe's values are the reader's own (ast
  and YAML literals);
* reproduced: the report says mapped, same or option and the plan has the true value; reward: the config's reward
  list holds the entry; sink: the config's telemetry.sinks (or run_name) holds it;
* silent: the report says mapped, same, option, reward or sink, but the plan (or the config) has another value;
* lost: every other setting, each with the report's kind and reason (owned, action, conflict).

share = reproduced / settings, per recipe, per engine and overall. The issue-17 columns (canonical, engine-internal,
missing) sort the same settings by whether a canonical knob could express them (ENGINE_INTERNAL below).

Usage (from the repository root; each import takes 5-60 s on 2 cores):

    python scripts/recipe_coverage.py [RECIPE_OR_FOLDER ...] [--env NAME=VALUE ...] [--engine-version ENGINE=VERSION]
        [--json OUT] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "tests" / "fixtures" / "recipes" / "measure"
ORACLE = REPO / "tests" / "fixtures" / "recipes" / "real" / "bash_oracle.sh"
ENGINES = ("verl", "openrlhf", "trl")
# what the scripts read from the machine they run on: verl's examples pick NPU or GPU by `$(python3 -c 'import
# torch_npu')`, which only running them knows (rlbridge import --env DEVICE=gpu)
ENV = {"DEVICE": "gpu"}
# the version a recipe is read as, where it is not the adapter's default (OpenRLHF's flat spelling reads as 0.9.10)
VERSIONS = {"train_vlm_math_hybrid_engine.sh": "0.11.0"}
MEASURED = ("mapped", "same", "option")
CANONICAL_KINDS = ("reward", "sink")

# native key prefix -> why it has no cross-engine meaning (memory placement and engine plumbing): issue 17's columns
ENGINE_INTERNAL = {
    "actor_rollout_ref.actor.fsdp_config.": "FSDP parameter/optimizer offload: how verl's FSDP workers place memory",
    "actor_rollout_ref.ref.fsdp_config.": "FSDP offload of the reference model",
    "critic.fsdp.": "FSDP offload of the critic",
    "actor_rollout_ref.model.use_shm": "verl copies the model to /dev/shm before loading",
    "actor_rollout_ref.rollout.load_format": "how verl's vLLM rollout loads its first weights",
    "actor_rollout_ref.rollout.layered_summon": "verl gathers FSDP LoRA weights layer by layer to save memory",
    "actor_rollout_ref.rollout.mode": "verl's sync/async rollout scheduling",
    "actor_rollout_ref.rollout.multi_turn.format": "verl's tool-call parser for multi-turn rollouts",
    "reward.reward_model.rollout.": "the inference server verl serves its reward model with (engine, memory share, TP)",
    "reward_model.rollout.": "the inference server verl serves its reward model with",
    "data.return_raw_chat": "verl's dataset hands the agent loop raw chat messages (rlbridge sets it as the rollout "
    "needs)",
    "data.truncation": "what verl's dataset does with a prompt over max_prompt_length (rlbridge drops or refuses them)",
    "vllm.sync_backend": "how OpenRLHF sends weights to vLLM (NCCL or gloo)",
    "vllm.enforce_eager": "vLLM without CUDA graphs",
    "vllm.enable_sleep": "vLLM releases GPU memory between rollouts (colocated)",
    "ds.enable_sleep": "DeepSpeed offloads between phases (colocated)",
    "ds.zero_stage": "DeepSpeed ZeRO partitioning",
    "ds.ring_attn_head_stride": "how OpenRLHF's ring attention splits heads",
    "ckpt.save_hf": "OpenRLHF also writes a Hugging Face copy of each checkpoint",
    "ckpt.output_dir": "where OpenRLHF writes the final model",
    # single-engine algorithm options: no other engine has the concept, so there is nothing to switch
    "reward.normalize_enable": "OpenRLHF only: normalises a reward model's score by the mean/std stored in an "
    "OpenRLHF-trained reward model (docs/roles.md)",
    "mask_truncated_completions": "TRL only: drops truncated completions from the loss (verl has no such switch; "
    "OpenRLHF's stop_properly_penalty_coef rescales their reward instead)",
}


@dataclass
class Row:
    """One setting of one recipe, as measured."""

    key: str
    value: Any
    line: int | None
    kind: str
    detail: str
    verdict: str = ""  # reproduced | silent | lost
    planned: Any = None
    internal: str | None = None


@dataclass
class Measured:
    recipe: Path
    engine: str
    rows: list[Row] = field(default_factory=list)
    error: str = ""

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)


def engine_of(path: Path) -> str:
    return path.parent.name if path.parent.name in ENGINES else path.name.split("_", 1)[0]


def bash_argv(script: Path, env: dict[str, str]) -> list[str]:
    """The launch command's argv as bash builds it (the oracle replaces python3 and ray by recorders)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "argv.bin"
        res = subprocess.run(
            ["bash", str(ORACLE), str(script.resolve()), str(out)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", tmp), **env},
        )
        if res.returncode or not out.exists():
            raise RuntimeError(f"bash did not reach the launch command: {res.stderr.strip()[-300:]}")
        return [a.decode() for a in out.read_bytes().split(b"\0")[:-1]]


def true_settings(recipe: Path, importer: Any, version: str, env: dict[str, str]) -> list | None:
    """The recipe's settings with the values bash gives them (None for a recipe that is not a shell script: the
    reader's literal values are its true ones)."""
    if recipe.suffix != ".sh":
        return None
    from rlbridge.importer.recipe import StaticRecipeSource, launch_environment

    argv = bash_argv(recipe, env)
    with launch_environment(env):
        return importer.read(StaticRecipeSource(shlex.join(["python3", *argv])), version).settings


def plan_view(result: Any, backend: Any) -> dict[str, Any]:
    """The imported config's plan, as the recipe's keys (a reward that does not plan here replaced, as the import
    did)."""
    from rlbridge.importer.solver import recipe_view, resolve_config

    data = {"run_name": "run", **result.config, "engine_version": result.recipe.version}
    data["resources"] = {"gpus_per_node": 1, **result.config.get("resources", {})}
    if not data["reward"] or any("do not plan" in n for n in result.notes):
        data["reward"] = [{"name": "digit_match"}]
    config = resolve_config(data)
    return recipe_view(backend, config, result.recipe)  # a key the plan leaves out: the engine's own default


def measure(recipe: Path, env: dict[str, str], versions: dict[str, str] | None = None) -> Measured:
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.errors import RLBridgeError
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.contract.importing import same

    engine = engine_of(recipe)
    out = Measured(recipe, engine)
    backend = get_plugin_manager().backend(engine)
    try:
        version = VERSIONS.get(recipe.name) or (versions or {}).get(engine)
        result = import_recipe(str(recipe), engine, version, env=env)
        truth = true_settings(recipe, backend.recipe_importer(), result.recipe.version, env)
        view = plan_view(result, backend)
    except (RLBridgeError, RuntimeError) as exc:
        out.error = str(exc).splitlines()[0]
        return out
    settings = result.recipe.settings
    if truth is not None and [s.key for s in truth] != [s.key for s in settings]:
        out.error = "the reader's settings are not bash's (tests/test_shell_reader.py would fail)"
        return out
    entries = {(e.key, e.line): e for e in result.entries}
    for k, s in enumerate(settings):
        true = truth[k].value if truth is not None else s.value
        entry = entries.get((s.spelling or s.key, s.line))
        if entry is None:  # an async setting is reported once per key
            entry = next(e for e in result.entries if e.key in (s.spelling, s.key))
        row = Row(entry.key, true, s.line, entry.kind, entry.detail, internal=internal(s.key))
        if entry.kind in MEASURED:
            row.planned = view.get(s.key, "<not in the plan>")
            row.verdict = "reproduced" if s.key in view and same(view[s.key], true) else "silent"
        elif entry.kind == "reward":  # every entry the report names is in the config's reward list
            named = [json.loads(spec) for spec in re.findall(r"reward\[\d+\]=(\{.*?\})(?=, reward\[|$)", entry.detail)]
            found = bool(named) and all(spec in result.config.get("reward", []) for spec in named)
            if truth is not None and isinstance(true, str):  # and with bash's value (a path, a function name)
                found = found and true in json.dumps(named)
            row.verdict = "reproduced" if found else "silent"
        elif entry.kind == "sink":
            sinks = result.config.get("telemetry", {}).get("sinks")
            row.verdict = "reproduced" if sinks or result.config.get("run_name") else "silent"
        else:
            row.verdict = "lost"
        out.rows.append(row)
    return out


def internal(key: str) -> str | None:
    bare = key.lstrip("-+")
    return next((why for prefix, why in ENGINE_INTERNAL.items() if bare.startswith(prefix)), None)


def recipes_in(paths: list[str]) -> list[Path]:
    found = []
    for path in map(Path, paths):
        items = sorted(path.rglob("*")) if path.is_dir() else [path]
        found += [p for p in items if p.suffix in (".sh", ".py", ".yaml") and p.name != "bash_oracle.sh"]
    return found


def share(reproduced: int, total: int) -> str:
    return f"{100 * reproduced / total:.1f} %" if total else "-"


def report(results: list[Measured], markdown: bool) -> str:
    lines = []
    if markdown:
        lines += ["| recipe | settings | reproduced | share | silent | lost |", "|---|---|---|---|---|---|"]
    for m in results:
        if m.error:
            lines.append(
                f"| {m.engine}/{m.recipe.name} | - | - | - | - | import refused: {m.error} |"
                if markdown
                else f"{m.engine}/{m.recipe.name}: {m.error}"
            )
            continue
        n, ok, silent = len(m.rows), m.count("reproduced"), m.count("silent")
        if markdown:
            lost = ", ".join(f"`{r.key}` ({r.kind})" for r in m.rows if r.verdict == "lost")
            lines.append(f"| {m.engine}/{m.recipe.name} | {n} | {ok} | {share(ok, n)} | {silent} | {lost} |")
        else:
            lines.append(f"{m.engine}/{m.recipe.name}: {n} settings, {ok} reproduced ({share(ok, n)}), {silent} silent")
            for r in m.rows:
                if r.verdict == "silent":
                    lines.append(f"    SILENT {r.key}={r.value!r} (line {r.line}): {r.kind}, planned {r.planned!r}")
                elif r.verdict == "lost":
                    lines.append(f"    lost {r.key}={r.value!r} (line {r.line}): {r.kind}: {r.detail}")
    if not markdown:
        lines.append("")
    measured = [m for m in results if not m.error]
    for engine in ENGINES + ("all",):
        group = [m for m in measured if engine in ("all", m.engine)]
        if not group:
            continue
        n = sum(len(m.rows) for m in group)
        ok = sum(m.count("reproduced") for m in group)
        silent = sum(m.count("silent") for m in group)
        name = "overall" if engine == "all" else engine
        text = f"{name}: {len(group)} recipes, {n} settings, {ok} reproduced ({share(ok, n)}), {silent} silent"
        lines.append(f"| **{name}** | {n} | {ok} | **{share(ok, n)}** | {silent} | |" if markdown else text)
    rows = [r for m in measured for r in m.rows]
    # issue 17: a canonical knob or kind could express it (reproduced, or rlbridge's own: owned, action), else
    # engine-internal (ENGINE_INTERNAL) or missing
    canonical = sum(r.verdict == "reproduced" or r.kind in ("owned", "action") for r in rows)
    internal_ = sum(not (r.verdict == "reproduced" or r.kind in ("owned", "action")) and bool(r.internal) for r in rows)
    if rows and not markdown:
        missing = len(rows) - canonical - internal_
        lines.append(
            f"issue 17's columns: {canonical} canonical, {internal_} engine-internal, {missing} missing "
            f"({share(canonical, canonical + missing)} of the cross-engine settings have a canonical knob or kind)"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(DEFAULT)], help="recipe files or folders")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE a script reads (default DEVICE=gpu)")
    parser.add_argument(
        "--engine-version", action="append", default=[], help="ENGINE=VERSION the recipes of an engine are read as"
    )
    parser.add_argument("--json", help="write every setting's verdict here")
    parser.add_argument("--markdown", action="store_true", help="print the table docs/import.md shows")
    args = parser.parse_args()
    env = {**ENV, **dict(item.split("=", 1) for item in args.env)}
    results = []
    for recipe in recipes_in(args.paths):
        results.append(measure(recipe, env, dict(item.split("=", 1) for item in args.engine_version)))
        done = results[-1]
        print(f"measured {done.engine}/{recipe.name}: {done.error or len(done.rows)}", file=sys.stderr, flush=True)
    print(report(results, args.markdown))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    f"{m.engine}/{m.recipe.name}": {"error": m.error, "settings": [r.__dict__ for r in m.rows]}
                    for m in results
                },
                indent=1,
                default=str,
            )
        )
    return 1 if any(m.count("silent") for m in results) else 0


if __name__ == "__main__":
    sys.exit(main())
