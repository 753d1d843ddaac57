"""What the run manifest adds to a run's start-up (docs/reproducibility.md): `manifest.build` after
`prepare`, for the quickstart on each backend whose environment is here (TRL in this process, verl
and OpenRLHF in their engine environments), median of N repeats, and its parts.

Usage: python benchmarks/manifest_cost.py [--repeats 7] [--backends trl,verl,openrlhf]
Prints one JSON object per backend (seconds; target: median < 0.2 s) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backends", default="trl,verl,openrlhf")
    args = parser.parse_args()

    from rlbridge.envs.provenance import package_set, site_dirs
    from rlbridge.errors import RLBridgeError
    from rlbridge.run import manifest
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import choose_engine_python, model_paths, prepare

    for backend in args.backends.split(","):
        try:
            prepared = prepare(load_config(QUICKSTART, [f"backend={backend}"]))
            python = choose_engine_python(prepared.config, prepared.backend)
        except RLBridgeError as exc:
            print(json.dumps({"backend": backend, "skipped": str(exc)[:200]}))
            continue
        parts: dict[str, list[float]] = {"total": [], "packages": [], "source": [], "patches": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            manifest.build(prepared.config, prepared.backend, prepared.plan, python, model_paths(prepared.config))
            parts["total"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            dirs = site_dirs(python)
            packages = package_set(dirs)
            parts["packages"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            manifest.source_state()
            parts["source"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            manifest.patch_entries(prepared.backend, prepared.plan, packages, dirs)
            parts["patches"].append(time.perf_counter() - t0)
        print(
            json.dumps(
                {
                    "backend": backend,
                    "engine_python": str(python) if python else "this process",
                    "distributions": len(packages),
                    "repeats": args.repeats,
                    **{f"{k}_median_s": round(statistics.median(v), 4) for k, v in parts.items()},
                    "total_max_s": round(max(parts["total"]), 4),
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
        )


if __name__ == "__main__":
    main()
