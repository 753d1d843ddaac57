"""Weight sync: the engine's default transfer against rlbridge's built-in `sync_changed` optimisation
(plugins/sync_changed.py, through the `rlbridge_weight_sync` hook), on TRL with a colocated vLLM on CPU
(docs/scale.md).

Four short GRPO runs of the quickstart model: {full fine-tune, LoRA on q_proj/v_proj} x {default,
plugins: [rlbridge_plugins.sync_changed]}. Per run, from metrics.jsonl: bytes and tensors sent per
sync, and TRL's own sync timer (timing/weight_sync_s), averaged over the syncs after the first one
(the first sync of sync_changed sends everything).

Usage (in an environment with TRL and vLLM, e.g. ~/.cache/rlbridge/envs/trl-1.16.0-vllm):
    python benchmarks/weight_sync.py [--steps 6] [--out runs/weight-sync]
Prints one JSON line per run and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARMS = {
    "full/default": [],
    "full/sync_changed": ["plugins=[rlbridge_plugins.sync_changed]"],
    "lora/default": ["model.lora={rank: 8, target_modules: [q_proj, v_proj]}"],
    "lora/sync_changed": [
        "model.lora={rank: 8, target_modules: [q_proj, v_proj]}",
        "plugins=[rlbridge_plugins.sync_changed]",
    ],
}


def run(arm: str, overrides: list[str], steps: int, out: Path, backend: str) -> dict:
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train
    from rlbridge.testing import QUICKSTART

    run_dir = out / arm.replace("/", "-")
    cfg = load_config(
        QUICKSTART,
        [
            f"backend={backend}",
            "engine_env=current",
            "rollout.engine=vllm",
            "resources.gpus_per_node=0",
            f"training.steps={steps}",
            "training.batch_size=2",
            "algorithm.group_size=4",
            "rollout.max_new_tokens=8",
            "telemetry.progress=false",
            f"output_dir={run_dir}",
            *overrides,
        ],
    )
    started = time.time()
    summary = train(cfg, progress=False)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the syncs after the first (sync_changed's first sends everything); per-step rows as measured too
    synced = [r for r in rows if "weight_sync/bytes" in r][1:] or [r for r in rows if "weight_sync/bytes" in r]
    mean = lambda key: statistics.fmean(r[key] for r in synced) if synced and all(key in r for r in synced) else None  # noqa: E731
    return {
        "arm": arm,
        "status": summary["status"],
        "wall_s": round(time.time() - started, 1),
        "syncs": len(synced),
        "bytes_per_sync": mean("weight_sync/bytes"),
        "tensors_per_sync": mean("weight_sync/tensors"),
        "sync_s": mean("timing/weight_sync_s"),
        "reward_last": rows[-1].get("reward/mean"),
        "per_step_tensors": [r.get("weight_sync/tensors") for r in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "weight-sync")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ", ".join(ARMS))
    parser.add_argument("--backend", default="trl")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one arm, in a process of its own
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run(args.one, ARMS[args.one], args.steps, args.out, args.backend)), flush=True)
        return
    results = []
    for arm in args.arms.split(","):
        # each arm in a fresh process: a plugin registered by one run (plugins:) and its state must not
        # reach the next run of the same process
        res = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                arm,
                "--steps",
                str(args.steps),
                "--out",
                str(args.out),
                "--backend",
                args.backend,
            ],
            capture_output=True,
            text=True,
        )
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{arm} failed:\n{(res.stdout + res.stderr)[-3000:]}")
        result = json.loads(line[len("RESULT ") :])
        print(json.dumps(result), flush=True)
        results.append(result)
    print("\n| run | bytes per sync | tensors per sync | sync time (s) |\n|---|---|---|---|")
    for r in results:
        sync_s = f"{r['sync_s']:.4f}" if r["sync_s"] is not None else "-"
        print(f"| {r['arm']} | {r['bytes_per_sync'] or 0:,.0f} | {r['tensors_per_sync'] or 0:.0f} | {sync_s} |")


if __name__ == "__main__":
    main()
