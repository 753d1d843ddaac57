"""Where the engine placed its Ray actors, read back from Ray (issue 16): which node each actor runs
on and which logical GPUs Ray assigned it.

Two sources, both Ray's own:
- every Ray worker process of a run reports itself once it has become an actor (`report_when_actor`,
  started by the adapters' boot in each engine process): its actor id, node id and the accelerator ids
  Ray assigned it (`ray.get_runtime_context()`), as a `placement_actor` event. Nothing engine-specific
  is hooked, so every actor class of every engine reports.
- the driver, at the end of the run while the cluster is still up (`snapshot`), reads the cluster's
  nodes and its actor table (class name, node, state of every actor the run created, from Ray's GCS,
  the source of Ray's state API), and writes both sources, merged by actor id, to
  `<run_dir>/placement.json`. The user's process compares that with the placement policy's layout
  (rlbridge.run.placement_readback).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlbridge.engine.events import EVENTS_ENV, write_event

PLACEMENT_FILE = "placement.json"
_started = False


def _is_ray_worker() -> bool:
    argv = getattr(sys, "orig_argv", None) or sys.argv or []
    return any(str(a).endswith("default_worker.py") for a in argv)


def report_when_actor(timeout_s: float = 1800.0, poll_s: float = 0.5) -> None:
    """In a Ray worker process of a run: once Ray has made it an actor, write one `placement_actor`
    event (actor id, node id, assigned logical GPUs, pid). A daemon thread; a no-op elsewhere."""
    global _started
    if _started or not os.environ.get(EVENTS_ENV) or not _is_ray_worker():
        return
    _started = True
    threading.Thread(target=_watch, args=(timeout_s, poll_s), name="rlbridge-placement", daemon=True).start()


def _watch(timeout_s: float, poll_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        ray = sys.modules.get("ray")
        try:
            if ray is None or not ray.is_initialized():  # also while ray is still being imported
                continue
            context = ray.get_runtime_context()
            actor_id = context.get_actor_id()
            if not actor_id:
                continue
            ids = context.get_accelerator_ids()
            node_id = context.get_node_id()
        except Exception:  # ray half imported, or not connected yet: reading placement never disturbs the engine
            continue
        write_event(
            {
                "kind": "placement_actor",
                "actor_id": actor_id,
                "node_id": node_id,
                "gpus": [str(i) for i in ids.get("GPU", [])],
                "pid": os.getpid(),
            }
        )
        return


def snapshot(run_dir: Path | str, events: Path | str | None = None) -> dict[str, Any] | None:
    """In the driver, with the cluster still up: the run's actors (class, node, state, assigned
    logical GPUs) and the cluster's nodes, written to `<run_dir>/placement.json`. None if Ray has no
    answer (reading placement never fails a run)."""
    try:
        import ray
        from ray._private.state import state  # the GCS actor table: works without the dashboard

        job = ray.get_runtime_context().get_job_id()
        nodes = [
            {
                "node_id": n["NodeID"],
                "alive": n["Alive"],
                "address": n.get("NodeManagerAddress"),
                "gpus": n.get("Resources", {}).get("GPU", 0),
            }
            for n in ray.nodes()
        ]
        table = state.actor_table(None)
    except Exception:
        return None
    reports: dict[str, dict[str, Any]] = {}
    events = events or os.environ.get(EVENTS_ENV)
    if events and Path(events).exists():
        for line in Path(events).read_text(encoding="utf-8").splitlines():
            if '"placement_actor"' in line:
                event = json.loads(line)
                reports[event["actor_id"]] = event
    actors = []
    for actor_id, row in table.items():
        if row.get("JobID") and job and row["JobID"] != job:
            continue  # another job's actor on a shared cluster
        report = reports.get(actor_id, {})
        actors.append(
            {
                "actor_id": actor_id,
                "class_name": (row.get("ActorClassName") or "").rsplit(".", 1)[
                    -1
                ],  # 'f.<locals>.WorkerDict' -> 'WorkerDict'
                "node_id": (row.get("Address") or {}).get("NodeID") or report.get("node_id"),
                "state": row.get("State"),
                "pid": row.get("Pid") or report.get("pid"),
                "gpus": report.get("gpus"),  # None: the actor did not report (it never started, or no rlbridge boot)
            }
        )
    result = {
        "nodes": nodes,
        "actors": sorted(actors, key=lambda a: (a["class_name"], a["node_id"] or "", a["actor_id"])),
    }
    path = Path(run_dir) / PLACEMENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return result
