"""rlbridge's overhead over the native engine: the quickstart through `rlbridge train` and through the
engine's own entry point (bench arms `ENGINE` and `native:ENGINE`, see docs/benchmarks.md), same seed,
in pairs whose order alternates (rlbridge first in odd pairs, native first in even ones; --first native
swaps that).

Each run is measured from outside by rlbridge.bench.arms.run_one (the whole process, start to exit; the
arrival time of every step). Per run:
  per-step time = (arrival of the last step - arrival of step 2) / (steps - 2)   (steady state)
  fixed time    = wall - steps x per-step time                                   (start-up + teardown)
and per pair the rlbridge/native ratios of wall and per-step time, the extra fixed seconds, and the
same split in CPU seconds (user + system of the process tree, sampled when each step arrives; far
steadier than wall time under other jobs' load, and complete where the tree reaps its children, as
TRL's does), and whether the reward curves are identical. The 1-minute load average is recorded before every run (on a
shared
machine the numbers are only as good as the load is steady).

Usage: python benchmarks/overhead.py [--engine trl|verl|openrlhf] [--pairs 3] [--steps 20]
         [--lock FILE ...] [--out DIR] [--first rlbridge|native]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSIONS = {"trl": None, "verl": "0.9.1", "openrlhf": "0.11.2"}


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def per_run(result: dict, steps: int) -> dict:
    arrivals = {int(k): v for k, v in result["step_arrival_s"].items()}
    last = max(arrivals)
    per_step = (arrivals[last] - arrivals[2]) / (last - 2) if last > 2 else None
    cpu = {int(k): v for k, v in (result.get("step_cpu_s") or {}).items()}
    per_step_cpu = (cpu[last] - cpu[2]) / (last - 2) if last > 2 and last in cpu and 2 in cpu else None
    rewards = [row.get("reward/mean") for row in result["history"]]
    engine_step = (
        statistics.median([r["timing/step_s"] for r in result["history"][1:] if "timing/step_s" in r] or [0]) or None
    )
    return {
        "wall_s": result["wall_s"],
        "cpu_s": result.get("cpu_s"),
        "per_step_s": per_step,
        "per_step_cpu_s": per_step_cpu,
        "fixed_cpu_s": result["cpu_s"] - steps * per_step_cpu
        if per_step_cpu is not None and result.get("cpu_s")
        else None,
        "fixed_s": result["wall_s"] - steps * per_step if per_step else None,
        "engine_step_s": engine_step,
        "first_step_arrival_s": arrivals.get(1),
        "rewards": rewards,
        "peak_tree_rss_mb": result["peak_tree_rss_mb"],
        "status": result["status"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=sorted(VERSIONS), default="trl")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lock", action="append", default=[], help="flock slot file(s) held during each run")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs and overhead.json here")
    parser.add_argument(
        "--first", choices=["rlbridge", "native"], default="rlbridge", help="which arm runs first in pair 1"
    )
    opts = parser.parse_args()
    if opts.steps < 4:
        sys.exit("--steps: at least 4 (per-step time is taken from step 2 on)")
    from rlbridge.bench.arms import build_jobs, load_spec, run_one

    arm = opts.engine + (f"@{VERSIONS[opts.engine]}" if VERSIONS[opts.engine] else "")
    out = opts.out or Path(tempfile.mkdtemp(prefix="rlb-overhead-"))
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "overhead.yaml"
    spec_path.write_text(
        json.dumps(
            {
                "config": str(REPO / "configs" / "quickstart.yaml"),
                "set": [f"training.steps={opts.steps}"],
                "arms": [arm, f"native:{arm}"],
                "seeds": list(range(opts.pairs)),
            }
        )
    )
    spec, path = load_spec(spec_path)
    jobs, _ = build_jobs(spec, path)
    pairs = []
    for i in range(opts.pairs):
        pair = sorted(
            (j for j in jobs if j.seed == i), key=lambda j: j.arm_index
        )  # [rlbridge, native]; the order is chosen here
        order = pair if (i % 2 == 0) == (opts.first == "rlbridge") else pair[::-1]
        runs = {}
        for job in order:
            load = os.getloadavg()[0]
            result = run_one(job, out / "runs" / job.dirname, [Path(p) for p in opts.lock] or None)
            if result["status"] != "completed":
                sys.exit(f"{job.arm} seed {job.seed} failed: see {out / 'runs' / job.dirname / 'output.log'}")
            runs[job.kind] = {**per_run(result, opts.steps), "load_avg_1m_before": load}
        r, n = runs["rlbridge"], runs["native"]
        row = {
            "pair": i + 1,
            "first": order[0].kind,
            "rlbridge": r,
            "native": n,
            "wall_ratio": r["wall_s"] / n["wall_s"],
            "per_step_ratio": r["per_step_s"] / n["per_step_s"],
            "cpu_ratio": r["cpu_s"] / n["cpu_s"] if r["cpu_s"] and n["cpu_s"] else None,
            "cpu_extra_s": r["cpu_s"] - n["cpu_s"],
            "per_step_cpu_ratio": r["per_step_cpu_s"] / n["per_step_cpu_s"]
            if r["per_step_cpu_s"] and n["per_step_cpu_s"]
            else None,
            "fixed_cpu_extra_s": r["fixed_cpu_s"] - n["fixed_cpu_s"]
            if r["fixed_cpu_s"] is not None and n["fixed_cpu_s"] is not None
            else None,
            "fixed_extra_s": r["fixed_s"] - n["fixed_s"],
            "rewards_identical": r["rewards"] == n["rewards"],
        }
        pairs.append(row)
        print(
            f"pair {i + 1} ({order[0].kind} first; load {r['load_avg_1m_before']:.1f}/{n['load_avg_1m_before']:.1f}): "
            f"wall {r['wall_s']:.1f} / {n['wall_s']:.1f} s = {row['wall_ratio']:.3f}; per step "
            f"{r['per_step_s']:.3f} / {n['per_step_s']:.3f} s = {row['per_step_ratio']:.3f}; fixed "
            f"{r['fixed_s']:.1f} / {n['fixed_s']:.1f} s (+{row['fixed_extra_s']:.2f} s); CPU "
            f"{r['cpu_s']:.1f} / {n['cpu_s']:.1f} s (+{row['cpu_extra_s']:.2f} s), per step "
            f"{_f(r['per_step_cpu_s'])} / {_f(n['per_step_cpu_s'])} s = {_f(row['per_step_cpu_ratio'])}, fixed "
            f"+{_f(row['fixed_cpu_extra_s'])} s; "
            f"identical rewards: {row['rewards_identical']}",
            flush=True,
        )
    summary = {
        "engine": arm,
        "steps": opts.steps,
        "pairs": pairs,
        "median_wall_ratio": statistics.median(p["wall_ratio"] for p in pairs),
        "median_per_step_ratio": statistics.median(p["per_step_ratio"] for p in pairs),
        "median_fixed_extra_s": statistics.median(p["fixed_extra_s"] for p in pairs),
        "median_cpu_extra_s": statistics.median(p["cpu_extra_s"] for p in pairs),
        "median_per_step_cpu_ratio": _median([p["per_step_cpu_ratio"] for p in pairs]),
        "median_fixed_cpu_extra_s": _median([p["fixed_cpu_extra_s"] for p in pairs]),
        "rewards_identical_all": all(p["rewards_identical"] for p in pairs),
        "load_avg_1m": [p[k]["load_avg_1m_before"] for p in pairs for k in ("rlbridge", "native")],
    }
    (out / "overhead.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{arm}: median over {opts.pairs} pairs: wall ratio rlbridge/native {summary['median_wall_ratio']:.3f}, "
        f"per-step ratio {summary['median_per_step_ratio']:.3f} (target <= 1.02), extra fixed time "
        f"{summary['median_fixed_extra_s']:.2f} s (target <= 0.5 s); CPU time: extra "
        f"{summary['median_cpu_extra_s']:.2f} s, "
        f"per-step ratio {_f(summary['median_per_step_cpu_ratio'])}, extra fixed "
        f"{_f(summary['median_fixed_cpu_extra_s'])} s; "
        f"identical rewards in every pair: "
        f"{summary['rewards_identical_all']}; load averages "
        f"{min(summary['load_avg_1m']):.1f}-{max(summary['load_avg_1m']):.1f}; "
        f"{out / 'overhead.json'}"
    )


if __name__ == "__main__":
    main()
