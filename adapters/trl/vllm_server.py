"""The vLLM server that TRL's asynchronous trainer generates through, started by rlbridge as part of the run
on the rollout's devices and stopped with it, and the weight transfer that reaches it without CUDA.

`trl.experimental.async_grpo.AsyncGRPOTrainer` (TRL 1.16) talks to a `vllm serve` server only over HTTP:
`/v1/completions` from its rollout worker process, `/pause?mode=keep` and `/resume` around each weight sync
(in-flight requests continue with the new weights), and the weight transfer it is given
(`weight_transfer=`, its `WeightTransferProtocol`). Its default `WeightTransferClient` is vLLM's NCCL
transfer engine, which needs CUDA on both sides. `SharedMemoryWeightTransfer` below is rlbridge's weight-sync
seam instead (rlbridge.engine.weight_sync: a `rlbridge_weight_sync` plugin may replace what is sent, and
the bytes and tensors sent are counted): one safetensors file in /dev/shm, loaded by each vLLM worker
through `/collective_rpc` (vllm_worker.py). That needs the server and trainer on one machine, as TRL's
own server mode does for NCCL's rendezvous here.

The server runs in the engine process's process group (rlbridge's launcher stops that whole group on
failure and Ctrl-C) and `VLLMServer.stop` ends it and its engine-core process in every other exit path.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKER_EXTENSION = "rlbridge_adapters.trl.vllm_worker.SafetensorsWeightLoader"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """`vllm serve` (vLLM's OpenAI server, dev endpoints on) for one run, on `devices` (logical GPU ids:
    CUDA_VISIBLE_DEVICES on a GPU node; on CPU the same label, which the placement read-back reports)."""

    def __init__(
        self,
        model: str,
        devices: list[int],
        log_path: Path,
        *,
        dtype: str,
        max_model_len: int | None,
        seed: int,
        max_num_seqs: int,
        gpu_memory_utilization: float,
        on_cpu: bool,
        threads: int | None = None,
        trl_serve: dict[str, int] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.devices = devices
        self.log_path = log_path
        if trl_serve is not None:  # GRPOTrainer's vllm_mode server: TRL's own `trl vllm-serve` command
            argv = trl_serve_command(
                model,
                self.port,
                dtype=dtype,
                max_model_len=max_model_len,
                enforce_eager=on_cpu,
                gpu_memory_utilization=None if on_cpu else gpu_memory_utilization,
                **trl_serve,
            ) + ["--seed", str(seed), "--max-num-seqs", str(max_num_seqs)]
        else:
            argv = self._async_command(model, dtype, seed, max_num_seqs, max_model_len)
            if not on_cpu:
                argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
        env = {
            **os.environ,
            "VLLM_SERVER_DEV_MODE": "1",  # /pause, /resume, /collective_rpc, TRL's weight-transfer endpoints
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, devices)),
        }
        if on_cpu:
            if trl_serve is None:
                argv.append("--enforce-eager")
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
        self.argv = argv
        self._log = open(log_path, "ab")
        # no new session: the launcher's stop of the engine's process group reaches the server too
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def _async_command(self, model: str, dtype: str, seed: int, max_num_seqs: int, max_model_len: int | None):
        """AsyncGRPOTrainer's server: vLLM's OpenAI server with rlbridge's weight loader on every worker."""
        argv = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            dtype,
            "--seed",
            str(seed),
            "--max-num-seqs",
            str(max_num_seqs),
            "--worker-extension-cls",
            WORKER_EXTENSION,
            "--tensor-parallel-size",
            "1",
        ]
        if max_model_len:  # else the model's own context length
            argv += ["--max-model-len", str(max_model_len)]
        return argv

    def wait_ready(self, timeout_s: float = 600.0) -> float:
        """Seconds until /health answered; raises with the server's own error if it exited first."""
        import requests

        started = time.time()
        while time.time() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the vLLM server exited with code {self.proc.returncode} before it answered: "
                    f"{' | '.join(_last_error(self.log_path))} (log: {self.log_path})"
                )
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return time.time() - started
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise TimeoutError(
            f"the vLLM server at {self.url} did not answer /health in {timeout_s:.0f} s (log: {self.log_path})"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """End the server and everything it started (vLLM's engine-core process); idempotent."""
        from rlbridge.engine.lifeline import descendants, kill_descendants

        if self.proc.poll() is None:
            children = descendants(self.proc.pid)
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            for pid in children:  # an engine core that outlived its API server
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        kill_descendants(grace_s=3.0, pid=self.proc.pid)
        self._log.close()

    def placement(self) -> dict[str, Any]:
        """Where the server runs, read back from its process (its CUDA_VISIBLE_DEVICES)."""
        return {"pid": self.proc.pid, "gpus": _visible_devices(self.proc.pid)}


def trl_serve_command(
    model: str,
    port: int,
    *,
    tensor_parallel_size: int,
    data_parallel_size: int,
    dtype: str,
    max_model_len: int | None,
    enforce_eager: bool,
    gpu_memory_utilization: float | None = None,
) -> list[str]:
    """What `trl vllm-serve` runs (TRL's own build_command: vLLM's server with its NCCL weight-transfer engine,
    processed logprobs and unlimited logprobs), for one run's server on 127.0.0.1."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    kwargs = dict(
        model=model,
        host="127.0.0.1",
        port=port,
        tensor_parallel_size=tensor_parallel_size,
        data_parallel_size=data_parallel_size,
        dtype=dtype,
        max_model_len=max_model_len,
        enforce_eager=enforce_eager,
    )
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    return build_command(ScriptArguments(**kwargs))


def _visible_devices(pid: int) -> list[int] | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"CUDA_VISIBLE_DEVICES="):
            value = item.split(b"=", 1)[1].decode()
            return [int(d) for d in value.split(",") if d.strip().isdigit()]
    return None


def _last_error(log: Path) -> list[str]:
    from rlbridge.engine.environments import first_error_lines

    return first_error_lines(log, n=4)


class SharedMemoryWeightTransfer:
    """TRL's `WeightTransferProtocol` through rlbridge's weight-sync seam, with no CUDA: pause the server
    (TRL's mode "keep": in-flight requests wait, then continue with the new weights), write the policy's
    weights to a safetensors file in /dev/shm, have every vLLM worker load it (/collective_rpc), resume.
    `last` holds the last sync's seconds, bytes and tensors (the run's weight-sync metrics)."""

    def __init__(
        self, url: str, pause_mode: str = "keep", timeout_s: float = 600.0, directory: str = "/dev/shm"
    ) -> None:
        self.url = url
        # "keep": in-flight requests freeze and continue with the new weights (rollout.partial_rollouts: true, TRL's
        # own choice); "wait": the pause waits until they finish, so no sample spans a sync
        self.pause_mode = pause_mode
        self.timeout_s = timeout_s
        self.partial = 0  # samples split by a sync (mode "keep" only)
        base = directory if os.path.isdir(directory) else None
        import tempfile

        fd, self.path = tempfile.mkstemp(prefix="rlbridge-trl-weights-", suffix=".safetensors", dir=base)
        os.close(fd)
        self.last: dict[str, float] = {}
        self.syncs = 0

    def _post(self, path: str, **kwargs) -> Any:
        import requests

        response = requests.post(f"{self.url}{path}", timeout=self.timeout_s, **kwargs)
        if response.status_code != 200:
            raise RuntimeError(f"vLLM server {path} answered {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def init_weight_transfer(self) -> None:
        import requests

        deadline = time.time() + self.timeout_s
        while True:
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise TimeoutError(f"the vLLM server at {self.url} is not answering")
            time.sleep(1.0)

    def pause(self) -> None:
        if self.pause_mode == "keep":
            self.partial += self._in_flight()
        self._post("/pause", params={"mode": self.pause_mode})

    def _in_flight(self) -> int:
        """Requests vLLM is generating or holding now (its Prometheus gauges): each is one sample (TRL asks n=1)
        that the coming sync splits between two policies."""
        import requests

        try:
            text = requests.get(f"{self.url}/metrics", timeout=10).text
        except requests.RequestException:
            return 0
        total = 0.0
        for line in text.splitlines():
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                total += float(line.rsplit(" ", 1)[-1])
        return int(total)

    def take_partial(self) -> int:
        """Samples split by a sync since the last call (mode "keep")."""
        count, self.partial = self.partial, 0
        return count

    def send_weights(self, iterator) -> None:
        from safetensors.torch import save_file

        from rlbridge.engine.weight_sync import Counted, weights_to_send

        started = time.perf_counter()
        counted = Counted(weights_to_send("trl", iterator))
        # safetensors refuses tensors that share memory (tied embeddings): each is written as its own copy
        tensors = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in counted}
        save_file(tensors, self.path)
        loaded = self._post(
            "/collective_rpc", json={"method": "rlbridge_load_weights", "args": [self.path], "timeout": self.timeout_s}
        )
        counts = [int(n) for n in (loaded or {}).get("results", [])]
        if not counts or any(n != len(tensors) for n in counts):
            raise RuntimeError(f"the vLLM workers loaded {counts} of the {len(tensors)} tensors sent")
        counted.report()
        self.syncs += 1
        self.last = {
            "seconds": time.perf_counter() - started,
            "bytes": float(counted.bytes),
            "tensors": float(counted.tensors),
        }

    def resume(self) -> None:
        self._post("/resume")

    def destroy(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
