"""The numbers, verdicts, report.md, results.json and plots of a bench (see rlbridge.bench.arms).

Statistics (scipy.stats): per arm, the mean over seeds and its 95 % Student-t interval
(mean +- t(0.975, n-1) * sd / sqrt(n)); between two arms, Welch's unequal-variance t-test on the
per-seed values (verdict "differs" when p < alpha, else "same within seed noise"). With 2-3 seeds
the test only sees large differences; the report says so next to every verdict.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from rlbridge import __version__

# canonical per-step phases, in the order an RL step runs them
PHASES = [
    ("timing/generate_s", "generation"),
    ("timing/reward_s", "reward"),
    ("timing/old_logprob_s", "old log-prob"),
    ("timing/ref_s", "reference"),
    ("timing/experience_s", "old log-prob + ref + values (one timer)"),
    ("timing/update_s", "actor update"),
    ("timing/weight_sync_s", "weight sync"),
]
STEP = "timing/step_s"
# the learning curve a run is judged by: reward/mean for RL, the stage's loss for an offline stage (docs/stages.md)
STAGE_LOSS = {"sft": "loss/sft", "dpo": "loss/dpo", "reward_model": "loss/reward_model"}


def curve_metric(config) -> str:
    """reward/mean for an RL run, the stage's loss (lower is better) for sft, dpo and reward_model."""
    return STAGE_LOSS.get(config.algorithm.name, "reward/mean")


# scalar per-run numbers aggregated across seeds: (key, label, unit, lower is better)
SCALARS = [
    ("auc", "reward AUC (mean reward over all steps)", "", False),
    ("reward_final", "final reward (last window)", "", False),
    ("step_s", "median step time", "s", True),
    ("gen_tokens_per_s", "generated tokens/s (median step)", "tok/s", False),
    ("samples_per_s", "samples/s (median step)", "1/s", False),
    ("startup_s", "start-up (process start to first step)", "s", True),
    ("train_s", "training time (sum of step times)", "s", True),
    ("wall_s", "whole run (process start to exit)", "s", True),
    ("fixed_s", "fixed cost (wall - training time)", "s", True),
    (
        "cpu_s",
        "CPU time of the whole process tree (user + system; complete where the tree reaps its children)",
        "s",
        True,
    ),
    ("peak_tree_rss_mb", "peak memory, whole process tree (RSS sum)", "MiB", True),
    ("steps_to_target", "steps to target reward", "", True),
    ("time_to_target_s", "time to target reward (from process start)", "s", True),
]


FLOAT32_REL_TOL = 1e-6  # a few float32 ulps (2**-24 ~ 6e-8 relative each)


def same_curve(a: list, b: list) -> bool:
    """Whether two reward curves agree at every step, at float32 precision: a native engine's own
    per-step log holds a float32 mean computed in float32 (OpenRLHF's TensorBoard scalars, verl's
    metrics), rlbridge's the float64 mean of the same rewards, and the two differ in the last ulps."""
    import math

    return (
        bool(a)
        and len(a) == len(b)
        and all(
            x == y or (x is not None and y is not None and math.isclose(x, y, rel_tol=FLOAT32_REL_TOL))
            for x, y in zip(a, b)
        )
    )


def _runs_in_ray_workers(backend: str) -> bool:
    """Whether the backend's engine works in Ray workers (Backend.scores_in_engine_workers), whose CPU
    time a native run's process tree does not hold; unknown backends count as one process tree."""
    from rlbridge.contract.registry import get_plugin_manager

    registered = get_plugin_manager().items["backend"].get(backend)
    return bool(registered and registered.item.scores_in_engine_workers)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_numbers(
    result: dict[str, Any], config, reward_at: list[int], window: int, target: float | None
) -> dict[str, Any]:
    """Every per-run number the report uses, from the run's metrics and the outside measurements."""
    history = result.get("history") or []
    arrivals = {int(k): v for k, v in (result.get("step_arrival_s") or {}).items()}
    metric = curve_metric(config)
    rewards = {int(r["step"]): r[metric] for r in history if metric in r}
    samples = config.training.batch_size * (
        1 if config.is_offline else config.algorithm.group_size
    )  # a row is a sample offline
    # step 1 carries warm-up (first generation, lazy init): timings use steps >= 2 where there are any
    timed = [r for r in history if r.get("step", 0) >= 2] or history
    out: dict[str, Any] = {"steps": len(history)}
    for s in reward_at:
        window_vals = [rewards[i] for i in range(s - window + 1, s + 1) if i in rewards]
        out[f"reward_at_{s}"] = sum(window_vals) / len(window_vals) if window_vals else None
    out["reward_final"] = out.get(f"reward_at_{reward_at[-1]}") if reward_at else None
    out["auc"] = sum(rewards.values()) / len(rewards) if rewards else None
    phases = {}
    for key, _ in [*PHASES, (STEP, "step")]:
        vals = [r[key] for r in timed if key in r]
        if vals:  # absent phase: absent, not zero
            phases[key] = _median(vals)
    out["phases"] = phases
    out["step_s"] = phases.get(STEP)
    gen_tps = [
        r["response_length/mean"] * samples / r[STEP] for r in timed if "response_length/mean" in r and r.get(STEP)
    ]
    out["gen_tokens_per_s"] = _median(gen_tps)
    out["samples_per_s"] = samples / out["step_s"] if out["step_s"] else None
    out["train_s"] = sum(r[STEP] for r in history if STEP in r) or None
    out["wall_s"] = result.get("wall_s")
    out["fixed_s"] = out["wall_s"] - out["train_s"] if out["wall_s"] is not None and out["train_s"] else None
    out["cpu_s"] = result.get("cpu_s")  # runs measured before bench recorded CPU time have none
    first = min(arrivals) if arrivals else None
    first_row = next((r for r in history if r.get("step") == first), {})
    out["startup_s"] = arrivals[first] - first_row.get(STEP, 0.0) if first is not None else None
    out["peak_tree_rss_mb"] = result.get("peak_tree_rss_mb")
    engine_peak = [r["memory/peak_mb"] for r in history if "memory/peak_mb" in r]
    out["engine_peak_mb"] = max(engine_peak) if engine_peak else None
    out["steps_to_target"] = out["time_to_target_s"] = None
    if target is not None:
        hit = next((s for s in sorted(rewards) if rewards[s] >= target), None)
        out["steps_to_target"] = hit
        out["time_to_target_s"] = arrivals.get(hit) if hit is not None else None
    return out


def interval(values: list[float], alpha: float = 0.05) -> dict[str, Any]:
    """Mean and its (1-alpha) Student-t interval across seeds."""
    from scipy import stats

    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "low": None, "high": None, "values": []}
    mean = sum(vals) / n
    if n == 1:
        return {"n": 1, "mean": mean, "low": None, "high": None, "values": vals}
    sd = statistics.stdev(vals)
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half, "sd": sd, "values": vals}


def verdict(a: list[float], b: list[float], alpha: float = 0.05) -> dict[str, Any]:
    """Welch's t-test on per-seed values: 'same within seed noise' or 'differs'."""
    from scipy import stats

    a = [float(v) for v in a if v is not None and math.isfinite(v)]
    b = [float(v) for v in b if v is not None and math.isfinite(v)]
    method = "Welch's t-test (unequal variances, two-sided) on per-seed values"
    if len(a) < 2 or len(b) < 2:
        return {"verdict": "not enough seeds (need 2 per arm)", "p": None, "method": method}
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        same = a[0] == b[0]
        return {
            "verdict": "identical" if same else "differs (no seed variance)",
            "p": None if same else 0.0,
            "method": method,
        }
    res = stats.ttest_ind(a, b, equal_var=False)
    p = float(res.pvalue)
    return {
        "verdict": "differs" if p < alpha else "same within seed noise",
        "p": p,
        "t": float(res.statistic),
        "method": method,
    }


def _git_commit() -> str | None:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=10
        )
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def aggregate(spec, jobs, diffs, results) -> dict[str, Any]:
    steps = jobs[0].config.training.steps if jobs else 0
    curve = curve_metric(jobs[0].config) if jobs else "reward/mean"
    reward_at = spec.reward_at or sorted({max(1, round(steps * f)) for f in (0.25, 0.5, 0.75, 1.0)})
    window = spec.window or max(1, steps // 10)
    by_key = {j.key: j for j in jobs}
    runs = []
    for res in results:
        job = by_key.get(res["key"])
        if job is None:
            continue
        nums = run_numbers(res, job.config, reward_at, window, spec.target_reward)
        runs.append({**{k: v for k, v in res.items() if k != "history"}, "numbers": nums, "status": res["status"]})
    arms: dict[str, Any] = {}
    for job in jobs:
        if job.arm in arms:
            continue
        done = [r for r in runs if r["arm"] == job.arm and r["status"] == "completed"]
        agg = {key: interval([r["numbers"].get(key) for r in done], spec.alpha) for key, *_ in SCALARS}
        for s in reward_at:
            agg[f"reward_at_{s}"] = interval([r["numbers"].get(f"reward_at_{s}") for r in done], spec.alpha)
        agg["phases"] = {
            key: interval([r["numbers"]["phases"].get(key) for r in done], spec.alpha)
            for key, _ in [*PHASES, (STEP, "step")]
            if any(key in r["numbers"]["phases"] for r in done)
        }
        versions = sorted({str(r.get("engine_version") or r.get("engine")) for r in done})
        arms[job.arm] = {
            "kind": job.kind,
            "backend": job.config.backend,
            "engine": job.engine,
            "engine_versions": versions,
            "runs_completed": len(done),
            "runs_total": sum(1 for j in jobs if j.arm == job.arm),
            "approximations": job.approximations,
            "aggregate": agg,
        }
    names = list(arms)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            entry = {"a": a, "b": b}
            for key in ("auc", "reward_final", "step_s"):
                va = arms[a]["aggregate"][key]["values"]
                vb = arms[b]["aggregate"][key]["values"]
                entry[key] = verdict(va, vb, spec.alpha)
                if key != "step_s":  # same seeds, same numbers: the engines computed the same thing
                    sa = {
                        r["seed"]: r["numbers"].get(key) for r in runs if r["arm"] == a and r["status"] == "completed"
                    }
                    sb = {
                        r["seed"]: r["numbers"].get(key) for r in runs if r["arm"] == b and r["status"] == "completed"
                    }
                    if len(sa) >= 2 and sa == sb:
                        entry[key]["verdict"] = "identical (seed by seed)"
                ma, mb = arms[a]["aggregate"][key]["mean"], arms[b]["aggregate"][key]["mean"]
                entry[key]["ratio_a_over_b"] = ma / mb if ma is not None and mb else None
            pairs.append(entry)
    overhead = native_overhead(arms, runs, jobs)
    # a finished run is reused when its config matches, whatever code ran it: say which commit ran which runs
    run_commits: dict[str, list[str]] = {}
    for r in runs:
        if r["status"] == "completed" and r.get("rlbridge_commit"):
            run_commits.setdefault(r["rlbridge_commit"], []).append(f"{r['arm']} seed {r['seed']}")
    return {
        "rlbridge_version": __version__,
        "rlbridge_commit": _git_commit(),
        "run_commits": run_commits,
        "python": platform.python_version(),
        "machine": platform.platform(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "spec": spec.model_dump(mode="json"),
        "steps": steps,
        "reward_at": reward_at,
        "window": window,
        "curve": curve,
        "statistics": {
            "interval": f"mean over seeds +- Student-t {100 * (1 - spec.alpha):.0f} % interval (scipy.stats.t)",
            "verdict": f"Welch's t-test (scipy.stats.ttest_ind, equal_var=False), alpha {spec.alpha}",
            "auc": f"mean of {curve} over all steps (area under the curve divided by the steps)",
            "reward_at": f"mean {curve} over steps s-{window - 1}..s",
            "timings": "per run: median over steps >= 2 of the engine's own per-step timers; then mean over seeds",
            "memory": "peak of the summed resident memory of the run's whole process tree, sampled every 0.2 s",
        },
        "differences": diffs,
        "arms": arms,
        "pairs": pairs,
        "native_overhead": overhead,
        "runs": runs,
    }


WALL_RATIO_TARGET = 1.02
"""What rlbridge may add to a run, as the whole-run wall ratio rlbridge/native, printed with the table."""


def native_overhead(arms: dict[str, Any], runs: list[dict[str, Any]], jobs) -> list[dict[str, Any]]:
    """rlbridge/native ratios for each native arm and the rlbridge arm of the same backend, by seed."""
    out = []
    configs = {j.arm: j.config for j in jobs}
    for name, arm in arms.items():
        if arm["kind"] != "native":
            continue
        peer = next(
            (
                n
                for n, a in arms.items()
                if a["kind"] == "rlbridge"
                and a["backend"] == arm["backend"]
                and configs[n].model_dump(exclude={"run_name", "output_dir", "checkpoint"})
                == configs[name].model_dump(exclude={"run_name", "output_dir", "checkpoint"})
            ),
            None,
        )
        if peer is None:
            continue
        pairs = []
        for run in runs:
            if run["arm"] != peer or run["status"] != "completed":
                continue
            nat = next(
                (r for r in runs if r["arm"] == name and r["seed"] == run["seed"] and r["status"] == "completed"), None
            )
            if nat is None:
                continue
            a, b = run["numbers"], nat["numbers"]
            ra = [h.get("reward/mean") for h in _history(run)]
            rb = [h.get("reward/mean") for h in _history(nat)]
            # CPU time is the measured process tree's: complete for TRL (one process), not for a native
            # Ray engine, whose workers are children of Ray's raylet, outside the tree (rlbridge reaps its own)
            whole_tree = not _runs_in_ray_workers(arm["backend"])
            pairs.append(
                {
                    "seed": run["seed"],
                    "first": "rlbridge" if run.get("started_at", 0) <= nat.get("started_at", 0) else "native",
                    "wall_ratio": a["wall_s"] / b["wall_s"],
                    "step_ratio": a["step_s"] / b["step_s"] if a["step_s"] and b["step_s"] else None,
                    "fixed_extra_s": (a["fixed_s"] or 0) - (b["fixed_s"] or 0),
                    "cpu_ratio": a["cpu_s"] / b["cpu_s"] if whole_tree and a.get("cpu_s") and b.get("cpu_s") else None,
                    "rewards_identical": same_curve(ra, rb),
                }
            )
        if pairs:
            out.append(
                {
                    "rlbridge_arm": peer,
                    "native_arm": name,
                    "pairs": pairs,
                    "median_wall_ratio": _median([p["wall_ratio"] for p in pairs]),
                    "median_step_ratio": _median([p["step_ratio"] for p in pairs if p["step_ratio"]]),
                    "median_fixed_extra_s": _median([p["fixed_extra_s"] for p in pairs]),
                    "median_cpu_ratio": _median([p["cpu_ratio"] for p in pairs if p["cpu_ratio"]]),
                    "rewards_identical_all": all(p["rewards_identical"] for p in pairs),
                    "rlbridge_first": sum(p["first"] == "rlbridge" for p in pairs),
                    "wall_ratio_target": WALL_RATIO_TARGET,
                }
            )
    return out


_HISTORIES: dict[str, list[dict[str, Any]]] = {}


def _history(run: dict[str, Any]) -> list[dict[str, Any]]:
    return _HISTORIES.get(run["key"], [])


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x.is_integer() and abs(x) < 1e6:
            return str(int(x))
        if abs(x) >= 1000:
            return f"{x:.0f}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{max(1, digits - len(str(int(abs(x)))))}f}"
    return str(x)


def _ci(agg: dict[str, Any]) -> str:
    if agg["mean"] is None:
        return "-"
    if agg["low"] is None:
        return _fmt(agg["mean"])
    return f"{_fmt(agg['mean'])} [{_fmt(agg['low'])}, {_fmt(agg['high'])}]"


def _mixed_commits(run_commits: dict[str, list[str]]) -> list[str]:
    """A line when the runs come from more than one commit (the bench reuses a finished run by its config)."""
    if len(run_commits) < 2:
        return []
    by_size = sorted(run_commits.items(), key=lambda item: -len(item[1]))
    parts = "; ".join(  # the others' runs by name
        f"{commit[:10]}: {len(runs)} run{'s' * (len(runs) != 1)}" + ("" if i == 0 else f" ({', '.join(runs)})")
        for i, (commit, runs) in enumerate(by_size)
    )
    return [
        "",
        f"**The runs come from {len(run_commits)} commits** ({parts}). A finished run is reused when its config "
        "matches, whatever code ran it: where the code between them changed what a run measures, delete those "
        "runs' directories and run the bench again.",
    ]


def markdown(data: dict[str, Any], plots: list[str]) -> str:
    arms = data["arms"]
    names = list(arms)
    lines = [
        "# Bench report",
        "",
        f"{data['date_utc']}; rlbridge {data['rlbridge_version']} (commit {(data['rlbridge_commit'] or '?')[:10]}); "
        f"Python {data['python']}; {data['machine']}.",
        f"{data['steps']} steps per run; seeds {data['spec']['seeds']}; values are the mean over seeds with the "
        f"95 % Student-t interval in brackets; verdicts: Welch's t-test, alpha {data['spec']['alpha']} "
        f"(with {len(data['spec']['seeds'])} seeds it detects only large differences).",
        *_mixed_commits(data.get("run_commits") or {}),
        "",
        "## Arms",
        "",
        "| arm | kind | engine | runs | approximated knobs |",
        "|---|---|---|---|---|",
    ]
    for n, a in arms.items():
        approx = "<br>".join(a["approximations"]) or "none"
        lines.append(
            f"| {n} | {a['kind']} | {', '.join(a['engine_versions']) or a['engine']} | "
            f"{a['runs_completed']}/{a['runs_total']} | {approx} |"
        )
    lines += ["", "What differs between arms (canonical config; everything else is identical):", ""]
    if data["differences"]:
        lines += ["| knob | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for key, values in data["differences"].items():
            lines.append(f"| `{key}` | " + " | ".join(f"`{json.dumps(values.get(n))}`" for n in names) + " |")
    else:
        lines.append("nothing but the kind of run")
    curve = data.get("curve", "reward/mean")
    lines += [
        "",
        "## Learning",
        "",
        f"Curve: `{curve}`" + (" (lower is better)" if curve != "reward/mean" else "") + ".",
        "",
        "| arm | AUC | "
        + " | ".join(f"{curve} @ {s}" for s in data["reward_at"])
        + " | steps to target | time to target (s) |",
        "|---|---|" + "---|" * len(data["reward_at"]) + "---|---|",
    ]
    for n, a in arms.items():
        g = a["aggregate"]
        lines.append(
            f"| {n} | {_ci(g['auc'])} | "
            + " | ".join(_ci(g[f"reward_at_{s}"]) for s in data["reward_at"])
            + f" | {_ci(g['steps_to_target'])} | {_ci(g['time_to_target_s'])} |"
        )
    if data["spec"].get("target_reward") is not None:
        lines.append(
            f"\nTarget reward {data['spec']['target_reward']}: first step whose reward/mean reaches it "
            "('-': not reached in the run)."
        )
    lines += [
        "",
        "## Speed and memory",
        "",
        "| arm | step (s) | generated tok/s | samples/s | start-up (s) | training (s) | whole run (s) | fixed (s) | "
        "CPU (s) | peak memory (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, a in arms.items():
        g = a["aggregate"]
        lines.append(
            f"| {n} | {_ci(g['step_s'])} | {_ci(g['gen_tokens_per_s'])} | {_ci(g['samples_per_s'])} | "
            f"{_ci(g['startup_s'])} | {_ci(g['train_s'])} | {_ci(g['wall_s'])} | {_ci(g['fixed_s'])} | "
            f"{_ci(g['cpu_s'])} | {_ci(g['peak_tree_rss_mb'])} |"
        )
    lines += [
        "",
        "Per-step phases from each engine's own timers (median over steps >= 2, mean over seeds; "
        "'-': the engine has no such phase or does not time it):",
        "",
        "| arm | " + " | ".join(label for _, label in PHASES) + " | whole step |",
        "|---|" + "---|" * (len(PHASES) + 1),
    ]
    for n, a in arms.items():
        ph = a["aggregate"]["phases"]
        lines.append(
            f"| {n} | "
            + " | ".join(_ci(ph[k]) if k in ph else "-" for k, _ in PHASES)
            + f" | {_ci(ph[STEP]) if STEP in ph else '-'} |"
        )
    if data["pairs"]:
        lines += [
            "",
            "## Pairwise verdicts",
            "",
            "| A | B | AUC | final reward | step time (ratio A/B) |",
            "|---|---|---|---|---|",
        ]
        for p in data["pairs"]:

            def cell(v: dict[str, Any], ratio: bool = False) -> str:
                s = v["verdict"] + (f" (p={v['p']:.3g})" if v.get("p") is not None else "")
                return s + (f", {v['ratio_a_over_b']:.2f}x" if ratio and v.get("ratio_a_over_b") else "")

            lines.append(
                f"| {p['a']} | {p['b']} | {cell(p['auc'])} | {cell(p['reward_final'])} | {cell(p['step_s'], True)} |"
            )
        lines.append(f"\nMethod: {data['statistics']['verdict']} on the per-seed values.")
    if data["native_overhead"]:
        lines += [
            "",
            "## rlbridge overhead against the native engine",
            "",
            f"Target: whole-run wall ratio rlbridge/native <= {WALL_RATIO_TARGET}. A pair is one seed of both arms, "
            "run one after the other; the order alternates between seeds.",
            "",
            "| rlbridge arm | native arm | pairs (rlbridge first) | wall ratio (median) | wall ratio per pair | "
            "step-time ratio (median) | extra fixed cost (s, median) | CPU-time ratio (median) | identical rewards |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for o in data["native_overhead"]:
            per_pair = ", ".join(_fmt(p["wall_ratio"]) for p in o["pairs"])
            lines.append(
                f"| {o['rlbridge_arm']} | {o['native_arm']} | {len(o['pairs'])} ({o.get('rlbridge_first', '-')}) | "
                f"{_fmt(o['median_wall_ratio'])} | {per_pair} | {_fmt(o['median_step_ratio'])} | "
                f"{_fmt(o['median_fixed_extra_s'])} | "
                f"{_fmt(o['median_cpu_ratio'])} | {o['rewards_identical_all']} |"
            )
        lines.append(
            "\nCPU time: engines that train in one process tree only (a native Ray engine's workers run under "
            "Ray's raylet, outside the measured process tree). Identical rewards: the reward curves agree at every "
            "step of every pair."
        )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", "Definitions: " + "; ".join(f"{k}: {v}" for k, v in data["statistics"].items()) + "."]
    return "\n".join(lines) + "\n"


def plot_all(out: Path, data: dict[str, Any], histories: dict[str, list[dict[str, Any]]]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    arms = data["arms"]
    colors = {n: f"C{i}" for i, n in enumerate(arms)}
    runs_of = {n: [r for r in data["runs"] if r["arm"] == n and r["status"] == "completed"] for n in arms}
    files = []

    metric = data.get("curve", "reward/mean")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n in arms:
        curves = [{int(h["step"]): h[metric] for h in histories.get(r["key"], []) if metric in h} for r in runs_of[n]]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        means = [sum(c[s] for c in curves) / len(curves) for s in steps]
        ax.plot(
            steps,
            means,
            color=colors[n],
            label=f"{n} (mean of {len(curves)})",
            ls="--" if arms[n]["kind"] == "native" else "-",
        )  # dashed: a native arm may lie on its peer
        if len(curves) > 1:
            ax.fill_between(
                steps,
                [min(c[s] for c in curves) for s in steps],
                [max(c[s] for c in curves) for s in steps],
                color=colors[n],
                alpha=0.2,
            )
    ax.set(xlabel="training step", ylabel=metric, title=f"{metric} vs step (band: min-max over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "reward_vs_step.png", dpi=100)
    plt.close(fig)
    files.append("reward_vs_step.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n in arms:
        for i, r in enumerate(runs_of[n]):
            arr = r.get("step_arrival_s") or {}
            pts = [
                (arr[str(int(h["step"]))], h[metric])
                for h in histories.get(r["key"], [])
                if metric in h and str(int(h["step"])) in arr
            ]
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    color=colors[n],
                    alpha=0.8,
                    lw=1,
                    label=n if i == 0 else None,
                )
    ax.set(xlabel="seconds since process start", ylabel=metric, title=f"{metric} vs wall clock (one line per seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "reward_vs_wall.png", dpi=100)
    plt.close(fig)
    files.append("reward_vs_wall.png")

    names = list(arms)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(names)), 4.5))
    bottoms = [0.0] * len(names)
    for i, (key, label) in enumerate([*PHASES, ("other", "other (step - phases)")]):
        vals = []
        for j, n in enumerate(names):
            ph = arms[n]["aggregate"]["phases"]
            if key == "other":
                total = (ph.get(STEP) or {}).get("mean") or 0.0
                v = max(total - bottoms[j], 0.0)
            else:
                v = (ph.get(key) or {}).get("mean") or 0.0
            vals.append(v)
        if any(vals):
            ax.bar(names, vals, bottom=bottoms, label=label, color=f"C{i}" if key != "other" else "lightgrey")
            bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set(ylabel="seconds per step", title="Step time by phase (engines' own timers)")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "phases.png", dpi=100)
    plt.close(fig)
    files.append("phases.png")

    fig, axes = plt.subplots(1, 3, figsize=(max(10, 3 * len(names)), 4))
    for ax, (key, label) in zip(
        axes,
        [
            ("gen_tokens_per_s", "generated tokens/s"),
            ("samples_per_s", "samples/s"),
            ("peak_tree_rss_mb", "peak memory (MiB)"),
        ],
    ):
        means, errs = [], []
        for n in names:
            g = arms[n]["aggregate"][key]
            means.append(g["mean"] or 0.0)
            errs.append((g["high"] - g["mean"]) if g["high"] is not None else 0.0)
        ax.bar(names, means, yerr=errs, color=[colors[n] for n in names], capsize=3)
        ax.set_title(label)
        plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput_memory.png", dpi=100)
    plt.close(fig)
    files.append("throughput_memory.png")
    return files


def write_report(out: Path, spec, jobs, diffs, results) -> dict[str, Any]:
    histories = {r["key"]: r.get("history") or [] for r in results}
    _HISTORIES.clear()
    _HISTORIES.update(histories)
    data = aggregate(spec, jobs, diffs, results)
    plots = plot_all(out, data, histories)
    (out / "results.json").write_text(json.dumps({**data, "histories": histories}, indent=1, default=str) + "\n")
    (out / "report.md").write_text(markdown(data, plots))
    return data
