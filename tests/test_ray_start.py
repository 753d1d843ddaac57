"""Starting a run's private Ray cluster on a busy machine (rlbridge.engine.ray_cluster), without Ray:
a stand-in module records what ray.init saw."""

from __future__ import annotations

import os
import sys
import types

from rlbridge.engine.ray_cluster import ray_cluster


def _fake_ray(seen: dict) -> types.ModuleType:
    ray = types.ModuleType("ray")

    def init(**kwargs):
        seen["init"] = kwargs
        seen["gcs_wait"] = os.environ.get("RAY_gcs_server_port_wait_time_s")

    ray.init = init
    ray.shutdown = lambda: None
    return ray


def test_a_private_cluster_gives_its_gcs_longer_than_rays_30_s_to_start(monkeypatch):
    # verl 0.9.1's compat cell failed a run before it began: its GCS took over Ray's default 30 s to
    # write its port file beside another engine run on 2 cores
    seen: dict = {}
    monkeypatch.setitem(sys.modules, "ray", _fake_ray(seen))
    environ = {k: v for k, v in os.environ.items() if k != "RAY_gcs_server_port_wait_time_s"}
    monkeypatch.setattr(os, "environ", environ)  # what ray_cluster sets stays in this test
    with ray_cluster(num_cpus=2, env={}):
        pass
    assert seen["init"]["address"] == "local" and seen["gcs_wait"] == "120"


def test_the_users_own_gcs_wait_is_kept(monkeypatch):
    seen: dict = {}
    monkeypatch.setitem(sys.modules, "ray", _fake_ray(seen))
    monkeypatch.setattr(os, "environ", {**os.environ, "RAY_gcs_server_port_wait_time_s": "7"})
    with ray_cluster(num_cpus=2, env={}):
        pass
    assert seen["gcs_wait"] == "7"
