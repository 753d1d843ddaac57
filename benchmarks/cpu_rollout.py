"""CPU rollout work: the reward worker pool and the code sandbox (docs/performance.md).

1. scaling: a CPU-heavy reward (pure-Python loop per sample) through the pool with 1 and 2
   workers, samples per second and their ratio (target >= 1.8x on 2 cores);
2. sandbox: sandboxed executions per second of a trivial program, 2 at a time (target >= 50/s);
   judge: rows judged per second by code_tests' judge (4 asserts, each call a fresh process), 2 at a
   time, against the trivial-program rate measured before and after it (target >= 0.5x);
3. latency: one quickstart-shaped reward call (digit_match, 64 samples) inline and through the pool;
4. overhead: the quickstart (TRL) with its trivial reward as a function that goes to the pool
   (examples/native_rewards/trl_reward.py:digit_share, digit_match in TRL's convention; the built-in
   digit_match declares isolate=False and is never pooled) with rollout_workers.mode inline and
   process, the pool's extra reward time as a share of step time (target <= 5 %).
5. ray (not among the default parts: it needs Ray, an engine environment's Python, and the engine
   lock): the CPU-heavy reward on 1 and 2 Ray actors of rollout_workers.mode ray, placed on the
   CPU-only node of a simulated two-node cluster; samples per second and their ratio.

Usage: python benchmarks/cpu_rollout.py [--part scaling,sandbox,judge,latency,overhead,ray] [--steps 40]
Prints one JSON object per part; the load average is printed too (a shared machine skews 1 and 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BURN_LOOPS = 200_000


def burn(loops: int = BURN_LOOPS):
    """A CPU-heavy reward: a pure-Python loop per sample (holds the GIL, as real verifiers do)."""

    def reward(inputs):
        out = []
        for _ in inputs:
            acc = 0
            for i in range(loops):
                acc = (acc * 31 + i) % 1_000_003
            out.append(float(acc % 2))
        return out

    return reward


def scaling(samples: int = 64, repeats: int = 3) -> dict:
    from rlbridge.contract.rewards import RewardInput
    from rlbridge.engine.workers import RewardScorer, Settings

    spec = [{"name": "burn", "weight": 1.0, "args": {}, "factory": f"{Path(__file__).stem}:burn"}]
    inputs = [RewardInput(prompt="p", completion=str(i), completion_ids=[i]) for i in range(samples)]
    rates = {}
    for workers in (1, 2):
        with RewardScorer(spec, Settings(num_workers=workers, batch_size=4, timeout_s=600)) as scorer:
            scorer.score(inputs[:4])  # warm: workers started, plugin built
            best = 0.0
            for _ in range(repeats):
                t0 = time.perf_counter()
                scorer.score(inputs)
                best = max(best, samples / (time.perf_counter() - t0))
        rates[workers] = best
    return {
        "part": "scaling",
        "samples_per_s_1_worker": round(rates[1], 1),
        "samples_per_s_2_workers": round(rates[2], 1),
        "speedup": round(rates[2] / rates[1], 2),
        "target": ">= 1.8",
        "loadavg": os.getloadavg(),
    }


def ray_actors(samples: int = 64, repeats: int = 3, actor_counts: tuple[int, ...] = (1, 2)) -> dict:
    """rollout_workers.mode ray: the CPU-heavy reward on 1 and 2 Ray actors, placed by the custom
    resource on the CPU-only node of a simulated two-node cluster (ray.cluster_utils.Cluster on
    loopback, as tests/engines/test_ray_cluster.py): samples per second per actor count. Needs Ray
    (an engine environment's Python) and, on a shared machine, the engine lock."""
    import ray
    from ray.cluster_utils import Cluster

    import ray._private.ray_constants as ray_constants

    from rlbridge.contract.rewards import RewardInput
    from rlbridge.engine.workers import RewardScorer, Settings

    # the actors import this module by name; every Ray process on loopback (see the test's helper)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parent), str(REPO), os.environ.get("PYTHONPATH", "")]
    )
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    most = max(actor_counts)
    cluster = Cluster(
        initialize_head=True, head_node_args={"node_ip_address": "127.0.0.1", "num_cpus": 1, "num_gpus": 0}
    )
    try:
        cpu_node = cluster.add_node(
            node_ip_address="127.0.0.1", num_cpus=most, num_gpus=0, resources={"rollout_cpu": most}
        )
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        spec = [{"name": "burn", "weight": 1.0, "args": {}, "factory": f"{Path(__file__).stem}:burn"}]
        inputs = [RewardInput(prompt="p", completion=str(i), completion_ids=[i]) for i in range(samples)]
        rates, placed = {}, set()
        for actors in actor_counts:
            settings = Settings(mode="ray", num_workers=actors, batch_size=4, timeout_s=600)
            with RewardScorer(spec, settings) as scorer:
                scorer.score(inputs[:4])  # warm: actors started, plugin built
                placed |= {a["node_id"] for a in scorer._pool.where()}
                best = 0.0
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    scorer.score(inputs)
                    best = max(best, samples / (time.perf_counter() - t0))
            rates[actors] = best
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "part": "ray",
        **{f"samples_per_s_{n}_actors": round(r, 1) for n, r in rates.items()},
        "speedup": round(rates[most] / rates[min(actor_counts)], 2),
        "actors_on_cpu_node_only": placed == {cpu_node.node_id},
        "loadavg": os.getloadavg(),
    }


def sandbox(runs: int = 200, parallel: int = 2) -> dict:
    from rlbridge.engine.sandbox import run_python

    def one(_):
        return run_python({"main.py": "print(sum(range(100)))"}).outcome

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(parallel * 2)))  # warm the page cache
        c0, t0 = _cpu_s(), time.perf_counter()
        outcomes = list(pool.map(one, range(runs)))
        elapsed, cpu = time.perf_counter() - t0, _cpu_s() - c0
    # CPU seconds per run (this process and every sandbox process): what 2 idle cores could sustain
    return {
        "part": "sandbox",
        "runs": runs,
        "parallel": parallel,
        "runs_per_s": round(runs / elapsed, 1),
        "cpu_ms_per_run": round(1000 * cpu / runs, 1),
        "runs_per_s_on_2_idle_cores": round(2 * runs / cpu, 1),
        "ok": outcomes.count("ok"),
        "target": ">= 50",
        "loadavg": os.getloadavg(),
    }


def judge(runs: int = 200, parallel: int = 2, tests: int = 4) -> dict:
    """Judged executions per second: code_tests' judge (rlbridge.engine.sandbox.run_tests) on a
    trivial solution with `tests` asserts, 2 at a time, against `sandbox`'s trivial-program rate,
    which is what the in-sandbox harness before 835bcc1 cost (one sandboxed program per row)."""
    from rlbridge.engine.sandbox import run_python, run_tests

    solution = "def f(x):\n    return x + 1\n"
    cases = [f"assert f({i}) == {i + 1}" for i in range(tests)]

    def judged(_):
        return run_tests(solution, cases)[0]

    def program(_):
        return run_python({"main.py": "print(sum(range(100)))"}).outcome

    out: dict = {"part": "judge", "runs": runs, "parallel": parallel, "tests_per_row": tests}
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(judged, range(parallel * 2)))  # warm the page cache
        for name, fn in (("program", program), ("judged", judged), ("program_again", program)):
            c0, t0 = _cpu_s(), time.perf_counter()
            results = list(pool.map(fn, range(runs)))
            out[f"{name}_per_s"] = round(runs / (time.perf_counter() - t0), 1)
            # CPU per row (this process and every sandbox process): the rate on idle cores, unlike wall time here
            out[f"{name}_cpu_ms"] = round(1000 * (_cpu_s() - c0) / runs, 1)
            if name == "judged":
                out["judged_score_1"] = results.count(1.0)
    today = (out["program_per_s"] + out["program_again_per_s"]) / 2  # before and after: drift hits both
    today_cpu = (out["program_cpu_ms"] + out["program_again_cpu_ms"]) / 2
    out.update(
        {
            "judged_rows_per_s_vs_program": round(out["judged_per_s"] / today, 2),
            "judged_vs_program_by_cpu": round(today_cpu / out["judged_cpu_ms"], 2),
            "judged_tests_per_s": round(out["judged_per_s"] * tests, 1),
            "target": ">= 0.5",
            "loadavg": os.getloadavg(),
        }
    )
    return out


def _cpu_s() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def latency(calls: int = 200) -> dict:
    """The pool's cost per reward call of the quickstart's shape (digit_match over 64 samples)."""
    from rlbridge.contract.rewards import RewardInput
    from rlbridge.engine.workers import RewardScorer, Settings

    spec = [{"name": "digit_match", "weight": 1.0, "args": {}, "factory": "rlbridge_plugins.rewards:digit_match"}]
    xs = [
        RewardInput(
            prompt="1111",
            completion="1111222233334444",
            completion_ids=list(range(16)),
            answer="1",
            metadata={"prompt": "1111", "answer": "1"},
        )
        for _ in range(64)
    ]
    out = {"part": "latency", "samples_per_call": 64}
    for mode in ("inline", "process"):
        with RewardScorer(spec, Settings(mode=mode)) as scorer:
            scorer.score(xs)
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                scorer.score_plugin("digit_match", xs)
                times.append(time.perf_counter() - t0)
        out[f"{mode}_ms_median"] = round(1000 * statistics.median(times), 3)
    out["loadavg"] = os.getloadavg()
    return out


def _quickstart(mode: str, steps: int, out: Path) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "rlbridge",
        "train",
        str(REPO / "configs" / "quickstart.yaml"),
        "--set",
        f"training.steps={steps}",
        "--set",
        f"rollout_workers.mode={mode}",
        "--set",
        f"reward=[{{native: trl, function: '{REPO / 'examples' / 'native_rewards' / 'trl_reward.py'}:digit_share'}}]",
        "--set",
        f"output_dir={out}",
        "--set",
        "telemetry.progress=false",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if res.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{res.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def overhead(steps: int = 40, rounds: int = 2) -> dict:
    per_mode: dict[str, dict[str, list[float]]] = {
        "inline": {"step": [], "reward": []},
        "process": {"step": [], "reward": []},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for mode in ("inline", "process"):  # alternating: drift on a shared machine hits both
                rows = _quickstart(mode, steps, Path(tmp) / f"{mode}{r}")[5:]  # skip warm-up steps
                per_mode[mode]["step"] += [row["timing/step_s"] for row in rows]
                per_mode[mode]["reward"] += [row["timing/reward_s"] for row in rows if "timing/reward_s" in row]
    med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in per_mode.items()}
    extra = med["process"]["reward"] - med["inline"]["reward"]
    return {
        "part": "overhead",
        "steps": steps,
        "rounds": rounds,
        "step_s_inline": round(med["inline"]["step"], 4),
        "step_s_process": round(med["process"]["step"], 4),
        "reward_s_inline": round(med["inline"]["reward"], 5),
        "reward_s_process": round(med["process"]["reward"], 5),
        "pool_overhead_share_of_step": round(extra / med["inline"]["step"], 4),
        "target": "<= 0.05",
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", default="scaling,sandbox,judge,latency,overhead")
    parser.add_argument("--steps", type=int, default=40)
    opts = parser.parse_args()
    for part in opts.part.split(","):
        result = {
            "scaling": scaling,
            "sandbox": sandbox,
            "judge": judge,
            "latency": latency,
            "overhead": lambda: overhead(opts.steps),
            "ray": ray_actors,
        }[part]()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
