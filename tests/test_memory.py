"""The memory model (rlbridge/contract/memory.py, docs/memory.md): its formulas against what the libraries count
(autograd's saved tensors, accelerate's model size, DeepSpeed's ZeRO estimates), `rlbridge plan --memory` on every
backend, and the pre-flight check that refuses a run that cannot fit before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, REPO, run_cli, write_config
from rlbridge.contract import memory_check
from rlbridge.contract.memory import GiB, activation_bytes_per_token, read_shape, shape_from_config

FIXTURE_7B = REPO / "tests" / "fixtures" / "qwen2.5-7b-shape"
QWEN25_7B_PARAMETERS = 7_615_616_512  # Qwen/Qwen2.5-7B's model card: 7.61B


def qwen2(h: int, layers: int, heads: int, kv: int, inter: int, vocab: int = 101, tied: bool = True):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return cfg, Qwen2ForCausalLM(cfg).to(torch.float32)


def saved_activation_bytes(model, batch: int, tokens: int, checkpointing: bool) -> int:
    """What autograd keeps for the backward of one forward pass: the unique storages its saved tensors use,
    the parameters left out."""
    import torch

    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, model.config.vocab_size, (batch, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return sum(seen.values())


@pytest.mark.parametrize(
    "h, layers, heads, kv, inter",
    [(64, 2, 2, 1, 128), (128, 3, 4, 2, 256), (192, 2, 6, 3, 300), (256, 2, 8, 8, 512)],
)
@pytest.mark.parametrize("checkpointing", [False, True])
def test_activations_are_what_autograd_saves(h, layers, heads, kv, inter, checkpointing):
    """The activation formula per token equals the bytes a real transformers Qwen2 forward keeps for its backward
    (float32 on CPU, SDPA attention), with and without gradient checkpointing: non-default shapes (grouped-query
    attention, a head_dim other than 64, an intermediate size that is no multiple of the hidden size)."""
    cfg, model = qwen2(h, layers, heads, kv, inter)
    shape = shape_from_config(cfg.to_dict())
    batch, tokens = 3, 40
    measured = saved_activation_bytes(model, batch, tokens, checkpointing)
    kept, _ = activation_bytes_per_token(shape, 4, checkpointing)
    assert kept * batch * tokens == pytest.approx(measured, rel=0.02)


@pytest.fixture(scope="module")
def tiny_dir():
    from rlbridge.contract.models import materialize_path

    return Path(materialize_path("builtin:tiny-digits", "model.path"))


def header_only_model(target: Path, config_dir: Path, tokenizer_from: Path) -> Path:
    """benchmarks/memory_fit.py's: a model directory of config.json, safetensors headers and a tokenizer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_fit", REPO / "benchmarks" / "memory_fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.header_only_model(target, config_dir, tokenizer_from)


@pytest.fixture(scope="module")
def qwen7b(tiny_dir, tmp_path_factory):
    return header_only_model(tmp_path_factory.mktemp("qwen7b"), FIXTURE_7B, tiny_dir)


def test_parameter_count_matches_accelerate_and_the_weights(qwen7b, tiny_dir):
    """The parameters counted from config.json alone equal accelerate's count of the model built on the meta
    device (accelerate estimate-memory's calculate_maximum_sizes), the safetensors headers' and Qwen2.5-7B's
    published size; the largest gathered block is accelerate's largest layer (the output embedding here)."""
    import torch
    from accelerate import init_empty_weights
    from accelerate.utils import calculate_maximum_sizes
    from transformers import AutoConfig, AutoModelForCausalLM

    from_config = shape_from_config(json.loads((FIXTURE_7B / "config.json").read_text()))
    with init_empty_weights():
        meta = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(FIXTURE_7B), dtype=torch.float32)
    total_bytes, (largest_bytes, _) = calculate_maximum_sizes(meta)
    buffers = sum(b.numel() * b.element_size() for b in meta.buffers())  # the rotary tables: not parameters
    assert from_config.parameters == (total_bytes - buffers) // 4 == QWEN25_7B_PARAMETERS
    assert from_config.largest_gathered == largest_bytes // 4
    headers = read_shape(qwen7b)
    assert headers.parameters_from == "safetensors headers"
    assert headers.parameters == from_config.parameters
    tiny = read_shape(tiny_dir)  # tied embeddings, counted once, as in the weights
    assert shape_from_config(json.loads((tiny_dir / "config.json").read_text())).parameters == tiny.parameters


def test_accelerate_training_estimate_is_the_ddp_float32_state():
    """accelerate estimate-memory's training estimate for float32 Adam (estimate_training_usage) is what the model
    keeps for a float32 DDP policy on TRL: parameters, gradients and two moments, 16 bytes a parameter."""
    from accelerate.commands.estimate import estimate_training_usage

    from rlbridge.contract.backend import Plan
    from rlbridge_adapters.trl.memory import behaviour

    from rlbridge.run.loading import load_config

    config = load_config(QUICKSTART, ["resources.gpus_per_node=0"])
    b = behaviour(config, Plan("trl", "trl", "", {"args": {"use_cpu": True}, "env": {}}))
    shape = shape_from_config(json.loads((FIXTURE_7B / "config.json").read_text()))
    ours = shape.parameters * (b.param_bytes + b.grad_bytes + b.optimizer_bytes)
    theirs = estimate_training_usage(shape.parameters * 4, "float32")
    assert ours == theirs["model"] + theirs["gradients"] + theirs["optimizer"]


def _plan(config_path: Path, *overrides: str):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    return prepare(load_config(config_path, list(overrides)))


def model_states(prediction) -> int:
    """A training device's parameters, gathered layers, gradients and optimizer states: what DeepSpeed's
    estimate_zero*_model_states_mem_needs counts."""
    states = ("parameters", "gathered layers", "gradients", "optimizer states")
    device = prediction.devices[0]
    return sum(c.bytes for p in device.processes for c in p.components if c.role == "actor" and c.what in states)


OPENRLHF_PYTHON = Path(os.environ.get("RLBRIDGE_TEST_ENVS", Path.home() / ".cache/rlbridge/envs")) / (
    "openrlhf-0.11.2/bin/python"
)


@pytest.mark.skipif(not OPENRLHF_PYTHON.exists(), reason="DeepSpeed lives in the OpenRLHF environment, not created")
def test_openrlhf_zero_states_match_deepspeeds_estimate(qwen7b, tmp_path):
    """OpenRLHF's ZeRO-2 and ZeRO-3 (with and without offload) on 8 GPUs: the predicted model states of a device,
    and the host memory ZeRO-3 offload needs, equal DeepSpeed's own estimate_zero2/3_model_states_mem_needs run
    in OpenRLHF's environment (its host figure carries a 1.5 buffer factor)."""
    cfg = write_config(
        tmp_path,
        QUICKSTART.read_text().replace("builtin:tiny-digits", str(qwen7b)).replace("backend: trl", "backend: openrlhf"),
    )
    shape = read_shape(qwen7b)
    cases = {
        "z2": ("training.sharding=gradients",),
        "z3": ("training.sharding=parameters",),
        "z3-offload": ("training.sharding=parameters", "training.offload.optimizer=true"),
    }
    ours = {}
    for name, overrides in cases.items():
        prepared = _plan(cfg, "resources.gpus_per_node=8", "training.batch_size=64", *overrides)
        prediction = memory_check.predict_run(
            prepared.config, prepared.backend, prepared.plan, prepared.plan.layout, gpu_bytes=80 * GiB
        )
        host = sum(c.bytes for c in prediction.host if c.role == "actor") * 8
        ours[name] = (model_states(prediction), host)
    script = (
        "import json, sys\n"
        "from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as z2\n"
        "from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as z3\n"
        f"p, layer = {shape.parameters}, {shape.largest_gathered}\n"
        "print(json.dumps({'z2': z2(p, 8, 1, cpu_offload=False)[1],\n"
        "  'z3': z3(p, layer, 8, 1, cpu_offload=False)[1],\n"
        "  'z3-offload': z3(p, layer, 8, 1, cpu_offload=True, cpu_offload_params=False)[:2]}))\n"
    )
    out = subprocess.run([str(OPENRLHF_PYTHON), "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    assert ours["z2"][0] == pytest.approx(theirs["z2"], rel=1e-6)
    assert ours["z3"][0] == pytest.approx(theirs["z3"], rel=1e-6)
    cpu, gpu = theirs["z3-offload"]
    assert ours["z3-offload"][0] == pytest.approx(gpu, rel=1e-6)
    assert ours["z3-offload"][1] * 1.5 == pytest.approx(cpu, rel=1e-6)


def _training_processes() -> list[tuple[str, str]]:
    """(backend, the process that trains the policy) for each backend that declares its memory behaviour for
    the quickstart (Backend.memory_behaviour; plan is pure: no engine imported, nothing written)."""
    from rlbridge.contract.registry import PluginManager
    from rlbridge.run.loading import load_config

    found = []
    for name, registered in sorted(PluginManager().items["backend"].items()):
        backend, config = registered.item(), load_config(QUICKSTART, [f"backend={name}"])
        behaviour = backend.memory_behaviour(config, backend.plan(config))
        if behaviour is not None:
            found.append((name, behaviour.training_process))
    return found


@pytest.mark.parametrize("backend, process", _training_processes())
def test_plan_memory_prints_the_table_on_every_backend(backend, process):
    """`rlbridge plan configs/quickstart.yaml --memory` on each backend that declares its memory behaviour (no
    engine imported): the device's table with the training process it declares, the actor's state, the rollout,
    each phase and the verdict."""
    result = run_cli("plan", str(QUICKSTART), "--memory", "--set", f"backend={backend}")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for expected in (process, "actor", "parameters", "optimizer states", "activations", "loss logits", "rollout"):
        assert expected in text, expected
    assert "backward" in text and "generate" in text
    assert "peak of the machine" in text and "available" in text


def test_a_run_that_cannot_fit_is_refused_before_anything_starts(qwen7b, tmp_path):
    """A 7B model trained on this CPU (TRL, float32: 16 bytes a parameter is ~113 GiB of state alone): `rlbridge
    train` exits 2 with one line naming the role, the phase, the predicted and available bytes, and writes
    nothing (no run directory: no engine started)."""
    out_dir = tmp_path / "run"
    text = QUICKSTART.read_text().replace("builtin:tiny-digits", str(qwen7b))
    cfg = write_config(tmp_path, text + f"output_dir: {out_dir}\n")
    result = run_cli("train", str(cfg), "--set", "resources.gpus_per_node=0", "--no-progress")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "memory:" in line and "actor" in line and "phase" in line and "available" in line
    assert "GiB" in line and "--no-fit-check" in line
    assert not out_dir.exists()


def test_the_refusal_names_the_cheapest_knob_that_fits(qwen7b, tmp_path, monkeypatch):
    """verl on 8 x 80 GB GPUs with every rank a whole replica (sharding none) cannot hold a 7B model's fp32
    master weights, gradients and Adam moments (~113 GiB); the refusal names a knob the backend honours whose
    own prediction fits, and that prediction does fit."""
    monkeypatch.setattr(memory_check, "gpu_memory", lambda: 80 * GiB)
    cfg = write_config(
        tmp_path,
        QUICKSTART.read_text().replace("builtin:tiny-digits", str(qwen7b)).replace("backend: trl", "backend: verl"),
    )
    prepared = _plan(
        cfg,
        "resources.gpus_per_node=8",
        "training.batch_size=64",
        "training.strategy=fsdp",
        "training.sharding=none",
        "rollout.max_new_tokens=1024",
        "rollout.max_prompt_tokens=512",
        "training.micro_batch_size=2",
    )
    with pytest.raises(memory_check.ConfigError) as refused:
        memory_check.fit_check(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout)
    message = str(refused.value)
    assert message.startswith("memory: the actor's") and " phase brings each training device to " in message
    assert "the cheapest change that fits: --set training.sharding=" in message
    fix = message.split("the cheapest change that fits: ")[1].split(" (predicted")[0]
    overrides = [part for part in fix.split() if part != "--set"]
    fixed = _plan(
        cfg,
        "resources.gpus_per_node=8",
        "training.batch_size=64",
        "training.strategy=fsdp",
        "training.sharding=none",
        "rollout.max_new_tokens=1024",
        "rollout.max_prompt_tokens=512",
        "training.micro_batch_size=2",
        *overrides,
    )
    assert memory_check.fit_check(fixed.config, fixed.backend, fixed.plan, fixed.plan.layout).fits()


def test_a_smaller_micro_batch_is_cheaper_than_checkpointing(monkeypatch):
    """On CPU, where a micro batch of 64 samples of 2,000 tokens binds: in 2.5 GiB both gradient checkpointing and a
    smaller micro batch would fit; the refusal names the smaller micro batch (the same update in more passes, no
    recompute), the largest one that fits."""
    monkeypatch.setattr(memory_check, "machine_memory", lambda: (int(2.5 * GiB), "test"))
    base = ("resources.gpus_per_node=0", "rollout.max_new_tokens=2000", "training.batch_size=8")

    def check(*overrides):
        prepared = _plan(QUICKSTART, *base, *overrides)
        return memory_check.fit_check(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout)

    with pytest.raises(memory_check.ConfigError) as refused:
        check("training.micro_batch_size=64")
    message = str(refused.value)
    assert "activations" in message or "logits" in message
    assert "the cheapest change that fits: --set training.micro_batch_size=" in message
    assert "gradient_checkpointing" not in message
    micro = int(message.split("--set training.micro_batch_size=")[1].split()[0])
    assert micro < 64 and check(f"training.micro_batch_size={micro}").fits()
    assert check("training.micro_batch_size=64", "training.gradient_checkpointing=true").fits()  # it fits too
    for larger in (m for m in (32, 16, 8) if micro < m < 64):  # the named one is the largest that fits
        with pytest.raises(memory_check.ConfigError):
            check(f"training.micro_batch_size={larger}")


def test_no_fit_check_trains_anyway(tmp_path, monkeypatch):
    """--no-fit-check overrides the refusal: with the machine's memory reported as 100 MiB the quickstart is
    refused (exit 2), and trains two real TRL steps with the flag."""
    from typer.testing import CliRunner

    from rlbridge.cli import app

    monkeypatch.setattr(memory_check, "machine_memory", lambda: (100 * 1024**2, "test"))
    args = ["train", str(QUICKSTART), "--no-progress", "--set", "training.steps=2", "--set", f"output_dir={tmp_path}/q"]
    args += ["--set", "resources.gpus_per_node=0"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code != 0 and "memory:" in str(refused.exception or refused.output)
    assert not (tmp_path / "q").exists()
    trained = CliRunner().invoke(app, [*args, "--no-fit-check"])
    assert trained.exit_code == 0, trained.output
    assert json.loads((tmp_path / "q" / "summary.json").read_text())["steps"] == 2


def test_machine_memory_reads_the_cgroup_limit(tmp_path):
    """On CPU the memory a run may use: a cgroup v2 limit less what the cgroup uses, its reclaimable page cache
    (inactive_file) not counted, where that is less than MemAvailable; MemAvailable where no limit is set."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(f"MemTotal: {32 * 2**20} kB\nMemAvailable: {20 * 2**20} kB\n")
    cgroup = tmp_path / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text("max\n")
    assert memory_check.machine_memory(tmp_path) == (20 * GiB, "MemAvailable")
    (cgroup / "memory.max").write_text(f"{8 * GiB}\n")
    (cgroup / "memory.current").write_text(f"{3 * GiB}\n")
    (cgroup / "memory.stat").write_text(f"anon {2 * GiB}\ninactive_file {GiB}\nactive_file 0\n")
    available, source = memory_check.machine_memory(tmp_path)
    assert available == 6 * GiB and source.startswith("cgroup limit 8.00 GiB")


def test_a_model_whose_shape_is_unknown_here(capsys, monkeypatch, tmp_path):
    """A hub id that is not in the Hugging Face cache: `plan --memory` says so in one line (exit 2); `train`'s check
    warns and lets the run go on (its engine loads the model, the check cannot)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    result = run_cli("plan", str(QUICKSTART), "--memory", "--set", "model.path=someorg/not-cached")
    assert result.returncode == 2 and "not in the Hugging Face cache" in result.stderr
    prepared = _plan(QUICKSTART, "model.path=someorg/not-cached")
    assert memory_check.fit_check(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout) is None
    assert "memory not checked before the run" in capsys.readouterr().err


def test_verl_fsdp2_on_several_cpu_ranks_keeps_each_layers_collective_buffers():
    """verl's FSDP2 on 2 CPU ranks (gloo) all-gathers every layer in bf16 and reduce-scatters its gradients from an
    unsharded fp32 copy; glibc keeps about one set a layer (docs/memory.md: the 2-rank rows were 12-22 % low
    without it). The training process carries layers x layer parameters x (2 + 4) bytes from then on; one rank
    (no all-gather, no gloo) and a GPU (the caching allocator reuses the blocks) carry none."""
    what = "allocator (collective buffers kept in the heap)"

    def kept(*overrides):
        prepared = _plan(QUICKSTART, "backend=verl", *overrides)
        prediction = memory_check.predict_run(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout)
        trainer = prediction.devices[0].processes[0]
        assert trainer.name == "WorkerDict"
        found = [c for c in trainer.components if c.what == what]
        return prediction, (found[0].bytes if found else 0)

    prediction, two = kept("resources.gpus_per_node=0", "resources.cpu_ranks_per_node=2")
    shape = prediction.shape
    assert two == shape.layers * shape.layer_parameters * 6
    _, one = kept("resources.gpus_per_node=0", "resources.cpu_ranks_per_node=1")
    assert one == 0
    _, gpu = kept("resources.gpus_per_node=2")
    assert gpu == 0
