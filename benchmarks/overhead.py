"""rlbridge's overhead over TRL: the quickstart through `rlbridge train` and the same job written
directly against TRL (direct_trl_quickstart.py), same seed, alternating, in one run.

Prints the wall-time ratio (median over pairs, whole process each) and whether the reward curves
are identical. Usage: python benchmarks/overhead.py [--pairs 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd, env):
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{res.stderr[-3000:]}")
    return elapsed, res.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    opts = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    from rlbridge.run.loading import load_config
    from rlbridge.contract.models import materialize_model

    model_dir = materialize_model(load_config(REPO / "configs" / "quickstart.yaml"))
    ratios, curves_equal = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(opts.pairs):
            run_dir = Path(tmp) / f"rlbridge-{pair}"
            t_rlb, _ = timed(
                [sys.executable, "-m", "rlbridge", "train", "configs/quickstart.yaml", "--no-progress",
                 "--set", f"output_dir={run_dir}"], env)
            t_trl, out = timed([sys.executable, str(REPO / "benchmarks" / "direct_trl_quickstart.py"), model_dir,
                                str(Path(tmp) / f"direct-{pair}")], env)
            rlb = [json.loads(l)["reward/mean"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
            trl = [json.loads(l)["reward"] for l in out.splitlines() if l.startswith("{")]
            curves_equal.append(rlb == trl)
            ratios.append(t_rlb / t_trl)
            print(f"pair {pair + 1}: rlbridge {t_rlb:.1f} s, direct TRL {t_trl:.1f} s, ratio {t_rlb / t_trl:.3f}, "
                  f"identical rewards: {rlb == trl} (final {rlb[-1]:.3f} vs {trl[-1]:.3f})", flush=True)
    print(f"median wall-time ratio rlbridge/TRL: {statistics.median(ratios):.3f} over {opts.pairs} pairs "
          f"(target <= 1.02); reward curves identical in every pair: {all(curves_equal)}")


if __name__ == "__main__":
    main()
