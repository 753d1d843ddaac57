"""Placement read-back (issue 16): after a Ray engine has run, compare where its actors actually were
(`<run_dir>/placement.json`, written by rlbridge.engine.ray_placement from Ray's actor table and each
actor's own report of its node and assigned logical GPUs) with the layout the placement policy asked
for. The result goes into summary.json (`placement`) and every mismatch is a warning of the run.

What is compared, per canonical role (actor, rollout, reference, critic, reward; an engine's actor
classes map to roles through `Backend.actor_roles`):
- the actor and rollout roles were placed at all;
- each role of the layout holds as many logical GPUs (node, GPU id) as the layout gives it;
- `shared` layouts (colocate): rollout and reference sit on exactly the actor's devices (the rollout on some
  of them where rollout.data_parallel_size asks for fewer engines than the actor has devices);
  otherwise (split): the rollout's devices are disjoint from the actor's, the reference shares the actor's;
- with `resources.nodes` > 1, the actor role spans that many nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlbridge.contract.backend import roles_of_actor_class

PLACEMENT_FILE = "placement.json"


def compare(
    layout: dict[str, Any], placed: dict[str, Any], table: dict[str, tuple[str, ...]], nodes: int = 1
) -> dict[str, Any]:
    """The per-role devices read back from Ray, and what differs from `layout` (a placement policy's
    result: role -> device count, plus `shared`)."""
    index = {n["node_id"]: i for i, n in enumerate(placed.get("nodes", []))}

    def where(actor: dict[str, Any]) -> str:
        return f"node{index.get(actor['node_id'], '?')}"

    roles: dict[str, dict[str, Any]] = {}
    unreported = []
    for actor in placed.get("actors", []):
        mine = roles_of_actor_class(actor["class_name"], table)
        if not mine:
            continue
        if actor.get("gpus") is None:
            unreported.append(actor["class_name"])
        for role in mine:
            entry = roles.setdefault(role, {"actors": [], "devices": set(), "nodes": set()})
            entry["actors"].append(actor["class_name"])
            entry["nodes"].add(where(actor))
            entry["devices"].update(f"{where(actor)}:gpu{g}" for g in actor.get("gpus") or [])
    mismatches: list[str] = []
    for role in ("actor", "rollout"):
        if role in layout and role not in roles:
            mismatches.append(f"{role}: no Ray actor of the run holds the {role} role")
    for role, entry in roles.items():
        want = layout.get(role)
        if isinstance(want, int) and not isinstance(want, bool) and len(entry["devices"]) != want:
            mismatches.append(
                f"{role}: the policy gives it {want} device(s), the engine placed it on "
                f"{len(entry['devices'])} logical GPU(s) {sorted(entry['devices'])}"
            )
    actor_devices = roles.get("actor", {}).get("devices", set())
    shared = bool(layout.get("shared"))
    for role in ("rollout", "reference"):
        devices = roles.get(role, {}).get("devices")
        if devices is None or not actor_devices:
            continue
        fewer = role == "rollout" and layout.get("rollout", 0) < layout.get("actor", 0)  # rollout.data_parallel_size
        if (shared or role == "reference") and not (devices < actor_devices if fewer else devices == actor_devices):
            mismatches.append(
                f"{role}: on {sorted(devices)}, not on the actor's devices {sorted(actor_devices)}, "
                "which the policy shares with it"
            )
        elif not shared and role == "rollout" and devices & actor_devices:
            mismatches.append(
                f"rollout: shares {sorted(devices & actor_devices)} with the actor; the policy gives it devices of "
                "its own"
            )
    if nodes > 1 and "actor" in roles and len(roles["actor"]["nodes"]) < nodes:
        mismatches.append(f"actor: runs on {len(roles['actor']['nodes'])} of the {nodes} nodes (resources.nodes)")
    if unreported:
        mismatches.append(f"no device report from {sorted(set(unreported))} (their logical GPUs are unknown)")
    return {
        "layout": layout,
        "nodes": len(placed.get("nodes", [])),
        "roles": {
            r: {"actors": sorted(e["actors"]), "devices": sorted(e["devices"]), "nodes": sorted(e["nodes"])}
            for r, e in sorted(roles.items())
        },
        "mismatches": mismatches,
    }


def read_back(
    run_dir: Path, layout: dict[str, Any], table: dict[str, tuple[str, ...]], nodes: int = 1
) -> dict[str, Any] | None:
    """The comparison for one finished run, or None when the engine wrote no placement (not Ray, or Ray
    had no answer). Stores it back into placement.json next to what was read."""
    path = Path(run_dir) / PLACEMENT_FILE
    if not table or not path.exists():
        return None
    placed = json.loads(path.read_text())
    result = compare(layout, placed, table, nodes)
    path.write_text(json.dumps({**placed, "check": result}, indent=1))
    return result
