"""`rlbridge submit CONFIG --to slurm`: the run as one Slurm batch job.

The config is planned here first (every check `rlbridge plan` makes); then an sbatch script is
written to <output_dir>/submit/job.sbatch and submitted with `sbatch` (`--dry-run` prints it
instead). `resources.nodes` becomes --nodes, `resources.gpus_per_node` --gpus-per-node,
`resources.cpus_per_node` --cpus-per-task (None: --exclusive, the whole node); `launcher.slurm`
adds partition, account, QoS, time limit, a pyxis/enroot container and extra sbatch lines.

For a Ray engine (verl, OpenRLHF) the job starts a Ray head on its first node and a Ray worker on
each other node (`srun --overlap ... ray start --block`, one step per node), waits until every node
has joined, and runs `rlbridge train` on the first node with RAY_ADDRESS pointing at that head;
TRL runs without Ray. At the end, or on scancel / a time limit / preemption (SIGTERM, trapped), the
script stops the steps it started by their pids (each `ray start --block` then stops its node's Ray
processes), so nothing outlives the job. With `launcher.slurm.max_requeues`, the job is submitted
--requeue with --signal=B:USR1@requeue_signal_s: at that signal (the time limit nears) the job
requeues itself, and a preempted job is requeued by Slurm; the next start resumes from the newest
complete checkpoint (checkpoint.resume: auto), until the job has been restarted max_requeues times.

sbatch directly rather than submitit: the job is a shell script of srun steps (one Ray node each,
a container per step through pyxis), which is what a Slurm user reads, edits and debugs, and what
--dry-run should show; submitit submits a pickled Python callable through a script of its own and
its requeue runs that callable's checkpoint method, which has no place here (the engines checkpoint
themselves and rlbridge resumes from their checkpoints). It would add a dependency for less control.

The job's events (start, requeue, termination, end with exit code) are appended to
<output_dir>/submit/slurm_events.jsonl by the script; the job id and final state to
<output_dir>/submit/slurm.json by the submitting side, which follows the job's log
(<output_dir>/submit/slurm-<job id>.out) until the job leaves the queue.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rlbridge.engine.nodes import MAIN_ADDRESS_ENV as NODE_ADDRESS_ENV
from rlbridge.engine.nodes import MAIN_PORT_ENV as NODE_PORT_ENV
from rlbridge.engine.nodes import NODE_RANK_ENV

TERMINAL_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
)


def batch_script(
    job,
    record: Path,
    python: str,
    ray: str | None,
    ray_python: str | None,
    logical_gpus: int = 0,
    logical_cpus: int = 0,
) -> str:
    """The sbatch script that runs `job` (a planned RunConfig whose config file is
    <record>/config.yaml). `python` runs `rlbridge train`; `ray` is the `ray` command on the nodes
    (None: the backend does not use Ray) and `ray_python` a Python with Ray (to wait for the nodes);
    `logical_gpus`: on CPU (gpus_per_node 0), the GPUs each Ray node declares for the engine's
    placement, as the private cluster of a CPU run does; `logical_cpus` likewise the CPUs they declare."""
    sl, res = job.launcher.slurm, job.resources
    gpus = int(res.gpus_per_node)
    ray_gpus = gpus or logical_gpus
    q = shlex.quote
    directives = [
        f"--job-name=rlb-{job.run_name}",
        f"--nodes={res.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={res.cpus_per_node}" if res.cpus_per_node else "--exclusive",
        *([f"--gpus-per-node={gpus}"] if gpus else []),
        f"--output={record}/slurm-%j.out",
        "--open-mode=append",  # a requeued job continues its log
        *(["--requeue", f"--signal=B:USR1@{sl.requeue_signal_s}"] if sl.max_requeues else ["--no-requeue"]),
        *([f"--partition={sl.partition}"] if sl.partition else []),
        *([f"--account={sl.account}"] if sl.account else []),
        *([f"--qos={sl.qos}"] if sl.qos else []),
        *([f"--time={sl.time}"] if sl.time else []),
        *sl.sbatch_lines,
    ]
    container = ""
    if sl.container_image:
        container = f"--container-image={q(sl.container_image)}"
        mounts = [*sl.container_mounts]
        if mounts:
            container += f" --container-mounts={q(','.join(mounts))}"
    cpus = logical_cpus or res.cpus_per_node or "$SLURM_CPUS_ON_NODE"
    node_command = None
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH {d}" for d in directives),
        f"# written by `rlbridge submit --to slurm` for run {job.run_name} ({job.backend}); the run's config: "
        f"{record}/config.yaml",
        "set -uo pipefail",
        f"RECORD={q(str(record))}",
        f"MAX_REQUEUES={sl.max_requeues}",
        'RESTART="${SLURM_RESTART_COUNT:-0}"',
        "event() {  # one JSON line per event of this job, in the run's directory",
        '  printf \'{"event": "%s", "job_id": "%s", "restart": %s, "time": %s%s}\\n\' "$1" "$SLURM_JOB_ID" '
        '"$RESTART" "$(date +%s)" "${2:-}" >> "$RECORD/slurm_events.jsonl"',
        "}",
        'event start ", \\"nodes\\": \\"$SLURM_JOB_NODELIST\\""',
        'if [ "$RESTART" -gt "$MAX_REQUEUES" ]; then',
        '  event requeue_limit; echo "rlbridge: restarted $RESTART times, over launcher.slurm.max_requeues '
        '($MAX_REQUEUES)" >&2; exit 1',
        "fi",
        *sl.setup,
        "steps=()  # the srun steps this job started, stopped by pid at the end",
        "teardown() {",
        '  for pid in "${steps[@]}"; do kill -TERM "$pid" 2>/dev/null; done',
        '  for pid in "${steps[@]}"; do wait "$pid" 2>/dev/null; done',
        "}",
        "on_requeue() {  # USR1: the time limit nears; requeue from the newest checkpoint while allowed",
        '  if [ "$RESTART" -lt "$MAX_REQUEUES" ]; then event requeue; scontrol requeue "$SLURM_JOB_ID"; else event '
        "requeue_limit; fi",
        "}",
        "on_term() { event terminated; teardown; exit 143; }  # scancel, time limit, preemption, requeue",
        "trap on_requeue USR1",
        "trap on_term TERM INT",
        f"STEP=(srun --overlap --nodes=1 --ntasks=1 {container})".replace(" )", ")"),
    ]
    if ray is not None:
        lines += [
            'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
            "head_addr=$(scontrol show node \"${nodes[0]}\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
            "head_ip=$(getent ahostsv4 \"$head_addr\" | awk '{print $1; exit}')",
            f'export RAY_ADDRESS="$head_ip:{sl.ray_port}"',
            'RAY_TMP="/tmp/rlb-ray-$SLURM_JOB_ID"  # short: Ray\'s socket paths must stay under 108 bytes',
            # Ray's token authentication (Ray >= 2.5x; older Rays ignore the variables), with a token of this
            # job's own: every step and the driver inherit it; ~/.ray/auth_token, shared by a user's jobs, is left alone
            "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=\"$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')\"",
            f'"${{STEP[@]}}" -w "${{nodes[0]}}" {ray} start --head --block --node-ip-address="$head_ip" '
            f"--port={sl.ray_port} "
            f'--num-cpus={cpus} --num-gpus={ray_gpus} --include-dashboard=false --temp-dir="$RAY_TMP" &',
            "steps+=($!)",
            "ray_head=$!",
            # wait_nodes N: until N nodes are alive in the cluster (or the head's step died, or 600 s passed)
            "wait_nodes() {",
            f'  {ray_python} -c "import os, ray, sys, time\n'
            "deadline = time.time() + 600\n"
            "def check():\n"
            "    os.kill(int(sys.argv[3]), 0)  # the head step is alive\n"
            "    if time.time() > deadline: sys.exit('rlbridge: the Ray cluster did not come up in 600 s')\n"
            "while True:\n"
            "    try:\n"
            "        ray.init(address=sys.argv[1], log_to_driver=False); break\n"
            "    except (ConnectionError, RuntimeError):\n"
            "        check(); time.sleep(2)\n"
            "while len([n for n in ray.nodes() if n['Alive']]) < int(sys.argv[2]):\n"
            "    check(); time.sleep(2)\n"
            'ray.shutdown()" "$RAY_ADDRESS" "$1" "$ray_head" &',
            "  wait $! || { event end ', \"rc\": 1'; teardown; exit 1; }",
            "}",
            "wait_nodes 1",
            'for node in "${nodes[@]:1}"; do',
            f'  "${{STEP[@]}}" -w "$node" {ray} start --block --address="$RAY_ADDRESS" --num-cpus={cpus} '
            f"--num-gpus={ray_gpus} &",
            "  steps+=($!)",
            "done",
            f"wait_nodes {res.nodes}",
            'event ray_up ", \\"ray_address\\": \\"$RAY_ADDRESS\\""',
            'TRAIN_NODE=(-w "${nodes[0]}")',
        ]
    elif res.nodes > 1:
        # an engine without Ray that starts its own processes on every node (TRL: one accelerate launch each): one
        # step over every node; the node of SLURM_NODEID 0 runs `rlbridge train`, the others the node agent that runs
        # what its engine process publishes there, each told its rank and the first node's address
        # (rlbridge.engine.nodes); a port of this job's own, so two jobs sharing a node do not meet
        train = f'{python} -m rlbridge train "{record}/config.yaml" --no-progress'  # inside bash -c '...'
        agent = f'{python} -m rlbridge.engine.nodes "{job.output_dir}"'
        lines += [
            'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
            "head_addr=$(scontrol show node \"${nodes[0]}\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
            f"export {NODE_ADDRESS_ENV}=$(getent ahostsv4 \"$head_addr\" | awk '{{print $1; exit}}')",
            f"export {NODE_PORT_ENV}=$((20000 + SLURM_JOB_ID % 10000))",
            f"STEP=(srun --overlap --nodes={res.nodes} --ntasks-per-node=1 {container})".replace(" )", ")"),
            "TRAIN_NODE=()",
        ]
        node_command = (
            f'bash -c \'export {NODE_RANK_ENV}="$SLURM_NODEID"; if [ "$SLURM_NODEID" = 0 ]; then exec {train}; '
            f"else exec {agent}; fi'"
        )
    else:
        lines.append("TRAIN_NODE=()")
    command = node_command or f'{python} -m rlbridge train "$RECORD/config.yaml" --no-progress'
    lines += [
        f'"${{STEP[@]}}" "${{TRAIN_NODE[@]}}" {command} &',
        "train=$!",
        "steps+=($train)",
        # `wait` returns early when a trapped signal arrives (USR1 runs on_requeue, then we wait again)
        'while true; do wait "$train"; rc=$?; kill -0 "$train" 2>/dev/null || break; done',
        'event end ", \\"rc\\": $rc"',
        "teardown",
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


def _ray_commands(prepared, python_override: str | None) -> tuple[str, str] | tuple[None, None]:
    """(ray command, Python with Ray) on the nodes for a Ray engine, else (None, None)."""
    from rlbridge.run.runner import uses_ray
    from rlbridge.submit.job import job_engine_python

    if not uses_ray(prepared.backend):
        return None, None
    if prepared.config.launcher.slurm.container_image:
        return "ray", python_override or "python"
    engine_python = job_engine_python(prepared)  # this machine needs no engine environment for the job
    return shlex.quote(str(Path(engine_python).parent / "ray")), shlex.quote(str(engine_python))


def prepare_job(config, python: str | None = None):
    """Plan `config` for Slurm: (job config, batch script, record directory)."""
    from rlbridge.errors import ConfigError
    from rlbridge.submit.job import plan_job

    sl = config.launcher.slurm
    if sl.max_requeues and not config.checkpoint.interval:
        raise ConfigError(
            "launcher.slurm.max_requeues: a requeued job resumes from the newest checkpoint, and "
            "checkpoint.interval is 0 (none is saved): set checkpoint.interval, or max_requeues: 0"
        )
    prepared, job = plan_job(config, "slurm")
    job.output_dir = str(
        Path(job.output_dir).resolve()
    )  # the nodes share this file system (or mount it into the container)
    job.checkpoint.dir = str(Path(job.checkpoint.dir).resolve())
    if sl.max_requeues and job.checkpoint.resume is False:
        job.checkpoint.resume = "auto"  # the first start trains afresh, each requeued one resumes
    job.telemetry.progress = False
    record = Path(job.output_dir) / "submit"
    ray, ray_python = _ray_commands(prepared, python)
    train_python = python or sl.python or ("python" if sl.container_image else shlex.quote(sys.executable))
    logical_gpus = logical_cpus = 0
    if not int(job.resources.gpus_per_node):  # a CPU run: Ray's nodes declare what the plan's private cluster would
        native_ray = prepared.plan.native.get("ray") or {}
        logical_gpus = -(-int(native_ray.get("logical_gpus") or 0) // job.resources.nodes)
        logical_cpus = int(native_ray.get("num_cpus") or 0)
    return job, batch_script(job, record, train_python, ray, ray_python, logical_gpus, logical_cpus), record


def submit(config, dry_run: bool = False, follow: bool = True, python: str | None = None, echo=print) -> int:
    """Plan, write <output_dir>/submit/{config.yaml,job.sbatch}, then print the script (dry_run) or
    submit it and, with `follow`, print its log until the job leaves the queue; the exit code is 0
    when the job completed."""
    from rlbridge.errors import RLBridgeError
    from rlbridge.run.loading import dump_config

    job, script, record = prepare_job(config, python)
    record.mkdir(parents=True, exist_ok=True)
    (record / "config.yaml").write_text(dump_config(job))
    (record / "job.sbatch").write_text(script)  # with --dry-run too: `sbatch` it by hand
    if dry_run:
        sys.stdout.write(script)
        return 0
    if shutil.which("sbatch") is None:
        raise RLBridgeError(
            "--to slurm needs Slurm's sbatch on PATH (run this on a login node; --dry-run prints the script)"
        )
    res = subprocess.run(["sbatch", "--parsable", str(record / "job.sbatch")], capture_output=True, text=True)
    if res.returncode != 0:
        raise RLBridgeError(f"sbatch refused the job: {res.stderr.strip()}")
    job_id = res.stdout.strip().split(";")[0]
    _record(record, {"job_id": job_id, "state": "PENDING", "submitted": time.time()})
    echo(f"submitted Slurm job {job_id}; its log: {record}/slurm-{job_id}.out")
    if not follow:
        return 0
    return follow_job(job_id, record, echo)


def _record(record: Path, update: dict) -> None:
    path = record / "slurm.json"
    current = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**current, **update}, indent=2))


def job_state(job_id: str) -> tuple[str | None, int]:
    """(state, restart count) of a job from scontrol; (None, 0) once the controller forgot it."""
    res = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    if res.returncode != 0 or "JobState=" not in res.stdout:
        return None, 0
    fields = dict(f.split("=", 1) for f in res.stdout.split() if "=" in f)
    return fields.get("JobState"), int(fields.get("Restarts", "0") or 0)


def follow_job(job_id: str, record: Path, echo=print, poll_s: float = 2.0) -> int:
    """Print the job's log as it grows and record its state changes until it ends."""
    log_path, offset, last = record / f"slurm-{job_id}.out", 0, None
    while True:
        state, restarts = job_state(job_id)
        if log_path.exists():
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                fh.seek(offset)
                text = fh.read()
                offset = fh.tell()
            if text:
                sys.stdout.write(text)
                sys.stdout.flush()
        if (state, restarts) != last:
            last = (state, restarts)
            _record(record, {"state": state or "GONE", "restarts": restarts})
            echo(
                f"Slurm job {job_id}: {state or 'no longer known to the controller'}"
                + (f" (restart {restarts})" if restarts else "")
            )
        if state is None or state in TERMINAL_STATES:
            break
        time.sleep(poll_s)
    events = (
        [json.loads(line) for line in (record / "slurm_events.jsonl").read_text().splitlines()]
        if (record / "slurm_events.jsonl").exists()
        else []
    )
    ends = [e for e in events if e["event"] == "end"]
    final = state or ("COMPLETED" if ends and ends[-1].get("rc") == 0 else "UNKNOWN")
    _record(record, {"state": final, "ended": time.time()})
    return 0 if final == "COMPLETED" else 1
