"""How much of real recipes the canonical config expresses (issue 17's measurement).

Runs `rlbridge import RECIPE --from ENGINE --json` on every recipe of a folder (default: the nine of
tests/fixtures/recipes/examples/, 3 verl, 3 OpenRLHF, 3 TRL, written after the engines' own examples)
and sorts every setting the report lists:

* canonical: a canonical knob reproduces it (mapped), the plan sets the same value (same), or it is
  rlbridge's own concept (owned: trackers -> telemetry.sinks, run-directory paths -> output_dir /
  checkpoint.dir), or it is code or data a canonical kind takes (action: reward functions -> reward
  plugins, reward models -> reward: [{model}], agents -> environment plugins, hub datasets -> data.train);
* engine-internal: named in ENGINE_INTERNAL below with the reason it has no cross-engine meaning
  (memory placement and engine plumbing, or a concept only one engine has); these are not
  cross-engine settings (kept as backend_options, or set by rlbridge itself);
* missing: a backend_options key not in ENGINE_INTERNAL, or a conflict.

coverage = canonical / (canonical + missing). Usage (from the repository root):

    python scripts/recipe_coverage.py [RECIPE_OR_FOLDER ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "tests" / "fixtures" / "recipes" / "examples"

# native key prefix -> why it has no cross-engine meaning (memory placement and engine plumbing)
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


# recipe key -> the canonical knob that expresses it, where rlbridge import does not find it yet (its
# solver searches scalar knobs; tests/test_knobs_plan.py::test_trl_knobs plans both)
IMPORTER_GAPS = {
    "lora_target_modules": "model.lora.target_modules (a list)",
    "chat_template_kwargs": "model.chat_template_kwargs (a mapping)",
}
# why a setting stays missing
MISSING_WHY = {
    "data.max_samples": "OpenRLHF caps the prompts at max_samples; the canonical config counts steps (steps x "
    "batch_size "
    "prompts), so a cap that is not a multiple of the rollout batch differs by the remainder (same number "
    "of steps)",
    "actor.entropy_coef": "0.0 makes OpenRLHF compute (not use) the entropy; the canonical 0 leaves the flag unset "
    "(None): "
    "same training",
}


def internal(key: str) -> str | None:
    bare = key.lstrip("-+")
    return next((why for prefix, why in ENGINE_INTERNAL.items() if bare.startswith(prefix)), None)


def classify(setting: dict) -> str:
    kind = setting["kind"]
    if kind in ("mapped", "same", "owned", "action") or setting["key"] in IMPORTER_GAPS:
        return "canonical"
    if kind in ("option", "conflict") and internal(setting["key"]):
        return "engine-internal"  # a conflict here: rlbridge sets the key itself (e.g. ZeRO stage from the devices)
    return "missing"


def engine_of(path: Path) -> str:
    return path.name.split("_", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(DEFAULT)], help="recipe files or folders")
    parser.add_argument("--json", help="write the per-setting classification here")
    args = parser.parse_args()
    env = {**os.environ, "MODEL_PATH": "/tmp/x", "RM_PATH": "/tmp/x", "DATA_DIR": "/tmp/x"}
    rows, out, failed = [], {}, []
    recipes = [p for path in map(Path, args.paths) for p in (sorted(path.iterdir()) if path.is_dir() else [path])]
    for recipe in recipes:
        if recipe.suffix not in (".sh", ".yaml", ".py"):
            continue
        engine = engine_of(recipe)
        cmd = [
            sys.executable,
            "-m",
            "rlbridge.cli",
            "import",
            str(recipe),
            "--from",
            engine,
            "--reward",
            "digit_match",
            "--json",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode:
            print(f"{recipe.name}: import failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            failed.append(recipe.name)
            continue
        settings = json.loads(proc.stdout)["settings"]
        for s in settings:
            s["class"] = classify(s)
        out[recipe.name] = settings
        count = {c: sum(s["class"] == c for s in settings) for c in ("canonical", "engine-internal", "missing")}
        rows.append((recipe.name, len(settings), count))
        print(
            f"{recipe.name}: {len(settings)} settings, canonical {count['canonical']}, "
            f"engine-internal {count['engine-internal']}, missing {count['missing']}",
            flush=True,
        )
        for s in settings:
            if s["class"] == "missing":
                why = MISSING_WHY.get(s["key"]) or f"{s['kind']}: {s['detail']}"
                print(f"    missing: {s['key']}={s['value']!r} ({why})")
            elif s["key"] in IMPORTER_GAPS and s["kind"] not in ("mapped", "same"):
                print(f"    canonical, not found by rlbridge import: {s['key']} -> {IMPORTER_GAPS[s['key']]}")
    if not rows:
        return 1
    canonical = sum(c["canonical"] for _, _, c in rows)
    missing = sum(c["missing"] for _, _, c in rows)
    total = sum(n for _, n, _ in rows)
    print(
        f"\n{len(rows)} recipes, {total} settings: {canonical + missing} cross-engine, {canonical} with a canonical "
        "knob "
        f"({100 * canonical / (canonical + missing):.1f} %), {total - canonical - missing} engine-internal"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
