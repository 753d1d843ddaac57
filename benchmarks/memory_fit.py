"""Predicted against measured peak memory (issue 43, docs/memory.md): real `rlbridge train` runs on CPU of
random-initialised Qwen2 models of three sizes, each with and without gradient checkpointing, on 1 and 2 ranks
where the engine runs several on CPU, on TRL and on a Ray engine.

For every run the script compares the peak that `rlbridge plan --memory` predicts for each process
(rlbridge.contract.memory_check.predict_run) with the one measured: the resident set's high-water mark (VmHWM in
/proc/PID/status) of every process of the run, sampled every 0.2 s until it ends. The training process is the
one the adapter's MemoryBehaviour names (TRL: the process running GRPOTrainer, each accelerate rank when
launched; verl: the FSDP worker, Ray's WorkerDict; OpenRLHF: PolicyModelActor).

The models (built here, no hub): Qwen2 with hidden 384 x 3 layers (~10M parameters), 640 x 9 (~60M) and
1024 x 15 (~250M), head_dim 64, half as many key/value heads, MLP 4 x hidden, and a byte-level BPE tokenizer of
8192 tokens trained here (the builtin models' pipeline, on a larger synthetic corpus, so that the vocabulary and
the loss's logits are not negligible). The data: prompts of exactly 64 tokens; 64 new tokens (a random model
rarely stops early); 4 prompts x 4 samples a step, micro batches of 8 (two backward passes a step), KL to a
reference model (algorithm.kl_coef 0.01, so the reference is loaded; 0 on verl, which refuses a reference on
CPU), 2 steps.

Every run holds the machine-wide engine lock (flock /tmp/rlbridge-engine.lock).

Usage:
    python benchmarks/memory_fit.py                         # every row; prints the table (Markdown)
    python benchmarks/memory_fit.py --engines trl --sizes 10m --ranks 1     # a subset
    python benchmarks/memory_fit.py --write                 # also writes docs/memory.md's table
    python benchmarks/memory_fit.py --reuse --saved-only --write   # saved rows only, predictions as the model is now
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "runs" / "memory_fit"
LOCK = "/tmp/rlbridge-engine.lock"
START, END = "<!-- memory-fit:start -->", "<!-- memory-fit:end -->"
SIZES = {"10m": (384, 3), "60m": (640, 9), "250m": (1024, 15)}  # hidden, layers (head_dim 64)
VOCAB = 8192
PROMPT_TOKENS = 64
RESPONSE_TOKENS = 64
# verl 0.9.1 on CPU syncs weights to vLLM in 16 MB buckets (rlbridge's CPU plan), and vLLM refuses a bucket that
# holds a tied output layer without its embedding ("'lm_head.weight' was skipped because it is tied to
# 'model.embed_tokens.weight'"): verl's rows train the same shapes with an untied output layer
UNTIED = ("verl",)
# and its buckets must hold the largest tensor (250m's 33.5 MB embedding): rlbridge's CPU plan sets 16 MB, which
# verl refuses for a larger tensor ("is too large to fit in the bucket")
VERL_BUCKET_MB = 64
# how each engine's training process shows in its command line or Ray process title
TRAINING_PROCESS = {
    "trl": ("rlbridge_adapters.trl.launch", "rlbridge.engine.child", " train "),
    "verl": ("WorkerDict",),
    "openrlhf": ("PolicyModelActor",),
}


# ------------------------------------------------------------------------------------------------ models and data
def bpe_tokenizer(vocab_size: int = VOCAB):
    """A byte-level BPE tokenizer (the builtin models' pipeline, plugins/models.py) of `vocab_size` tokens trained
    on a synthetic corpus of syllable words and digit runs."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    from rlbridge_plugins.models import CHAT_TEMPLATE, SPECIAL_TOKENS

    rng = random.Random(0)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
    corpus = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(4000)]
    corpus += [d * n for d in "0123456789" for n in (2, 4, 8, 16, 32, 64)]
    tk = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<pad>", padding_side="left", model_max_length=512
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok, words


def build_model(size: str, tied: bool = True) -> Path:
    """The random Qwen2 of `size` with the BPE tokenizer, saved in float32 under runs/memory_fit/models/; `tied`:
    the output layer shares the embedding's weights (as Qwen2.5's small models)."""
    from rlbridge_plugins.models import save_model_dir

    hidden, layers = SIZES[size]
    target = OUT / "models" / (size if tied else f"{size}-untied")
    spec = {"hidden": hidden, "layers": layers, "vocab": VOCAB, "version": 1}
    if not tied:
        spec["tied"] = False
    marker = target / "rlbridge_builder.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return target
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok, _ = bpe_tokenizer()
    heads = hidden // 64
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=512,
        tie_word_embeddings=tied,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).to(torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    save_model_dir(model, tok, target, spec)
    return target


def build_data(model_dir: Path) -> Path:
    """64 training rows whose prompts are exactly PROMPT_TOKENS tokens in the model's tokenizer."""
    path = OUT / "data" / "prompts.jsonl"
    if path.exists():
        return path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rng = random.Random(1)
    _, words = bpe_tokenizer()
    rows = []
    while len(rows) < 64:
        ids = tok.encode(" ".join(rng.choice(words) for _ in range(80))).ids[:PROMPT_TOKENS]
        text = tok.decode(ids)
        if len(tok.encode(text).ids) == PROMPT_TOKENS:
            rows.append({"prompt": text, "answer": str(rng.randrange(10))})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def header_only_model(target: Path, config_dir: Path, tokenizer_from: Path) -> Path:
    """A model directory with `config_dir`'s config.json, a safetensors file holding only the header of every tensor
    the model has (names, bf16 shapes, offsets; no data: the memory model reads headers only) and a tokenizer: for
    plans of a 7B model's shape on a machine that holds no 7B model (tests/test_memory.py uses it too)."""
    import shutil
    import struct

    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(config_dir / "config.json", target / "config.json")
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir))
    header, offset = {}, 0
    for name, tensor in model.state_dict().items():
        size = tensor.numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    (target / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_from / name, target / name)
    return target


# Qwen2.5-7B (tests/fixtures/qwen2.5-7b-shape/config.json) on one node of 8 x 80 GB: each layout as rlbridge --set
# overrides of configs/quickstart.yaml, on the engines that run it, with the settings of the engines' own examples
# (verl examples/grpo_trainer/run_qwen2-7b.sh, OpenRLHF examples/scripts/train_grpo_ray_hybrid_engine.sh)
SEVEN_B = {
    "FSDP full shard (verl's run_qwen2-7b.sh: gradient checkpointing, micro 16, vLLM TP 2 at 0.6)": (
        ("verl", "trl"),
        [
            "training.strategy=fsdp",
            "training.sharding=parameters",
            "training.gradient_checkpointing=true",
            "training.micro_batch_size=16",
            "training.batch_size=1024",
            "training.mini_batch_size=1280",
            "algorithm.group_size=5",
            "algorithm.kl_coef=0.001",
            "rollout.max_prompt_tokens=512",
            "rollout.max_new_tokens=512",
            "rollout.engine=vllm",
            "rollout.tensor_parallel_size=2",
            "rollout.gpu_memory_utilization=0.6",
        ],
    ),
    "ZeRO-3 with the optimizer offloaded (OpenRLHF's hybrid-engine GRPO: micro 8, 1024 + 1024 tokens, vLLM TP 4 at "
    "0.6)": (
        ("openrlhf", "trl"),
        [
            "training.strategy=deepspeed",
            "training.sharding=parameters",
            "training.offload.optimizer=true",
            "training.gradient_checkpointing=true",
            "training.micro_batch_size=8",
            "training.batch_size=128",
            "algorithm.group_size=8",
            "algorithm.kl_coef=0.001",
            "rollout.max_prompt_tokens=1024",
            "rollout.max_new_tokens=1024",
            "rollout.engine=vllm",
            "rollout.tensor_parallel_size=4",
            "rollout.gpu_memory_utilization=0.6",
        ],
    ),
    "colocated vLLM at 0.5 (full shard, gradient checkpointing, micro 8, 512 + 1024 tokens)": (
        ("verl", "openrlhf", "trl"),
        [
            "training.sharding=parameters",
            "training.gradient_checkpointing=true",
            "training.micro_batch_size=8",
            "training.batch_size=128",
            "algorithm.group_size=8",
            "algorithm.kl_coef=0.001",
            "rollout.max_prompt_tokens=512",
            "rollout.max_new_tokens=1024",
            "rollout.engine=vllm",
            "rollout.gpu_memory_utilization=0.5",
        ],
    ),
}
STRATEGY = {"openrlhf": "deepspeed", "verl": "fsdp", "trl": "fsdp"}
# OpenRLHF's example sleeps vLLM (and can sleep DeepSpeed) between generations; rlbridge's plan leaves both off, so its
# rows are predicted both ways
OPENRLHF_SLEEP = ["backend_options.openrlhf.vllm.enable_sleep=true", "backend_options.openrlhf.ds.enable_sleep=true"]


def predict_7b() -> str:
    """The 7B predictions' Markdown table (docs/memory.md): each layout's peak per GPU, its phase and largest part,
    and the host memory offload needs, per engine."""
    from rlbridge.contract.memory import GiB, PHASE_LABELS, format_bytes
    from rlbridge.contract.memory_check import predict_run
    from rlbridge.contract.models import materialize_path
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    model = header_only_model(
        OUT / "models" / "qwen2.5-7b-shape",
        REPO / "tests" / "fixtures" / "qwen2.5-7b-shape",
        Path(materialize_path("builtin:tiny-digits", "model.path")),
    )
    lines = [
        "| layout | engine | peak per GPU | phase | largest part | host memory (node) |",
        "|---|---|---|---|---|---|",
    ]
    arms = [(layout, engine, overrides, []) for layout, (engines, overrides) in SEVEN_B.items() for engine in engines]
    arms += [
        (lay, "openrlhf", over, OPENRLHF_SLEEP) for lay, (engines, over) in SEVEN_B.items() if "openrlhf" in engines
    ]
    for layout, engine, overrides, extra in arms:
        name = engine + (" (vLLM and DeepSpeed asleep)" if extra else "")
        sets = [f"backend={engine}", f"model.path={model}", "resources.gpus_per_node=8", *overrides, *extra]
        sets = [o for o in sets if not o.startswith("training.strategy=")] + [f"training.strategy={STRATEGY[engine]}"]
        if "training.strategy=deepspeed" in overrides and engine == "trl":
            sets[-1] = "training.strategy=deepspeed"
        try:
            prepared = prepare(load_config(REPO / "configs" / "quickstart.yaml", sets))
        except Exception as exc:  # an engine that cannot run the layout says why
            lines.append(f"| {layout} | {name} | refused: {str(exc)[:160]} | | | |")
            continue
        p = predict_run(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout, gpu_bytes=80 * GiB)
        device, phase, peak = p.worst()
        top = device.top_component(phase)
        host = sum(c.bytes for c in p.host) * device.count
        lines.append(
            f"| {layout} | {name} | {format_bytes(peak)} | {PHASE_LABELS[phase]} | {top.role} {top.what} "
            f"({format_bytes(top.bytes)}) | {format_bytes(host) if host else '-'} |"
        )
    return "\n".join(lines)


def write_config(engine: str, size: str, checkpointing: bool, ranks: int, model_dir: Path, data: Path) -> Path:
    name = f"{engine}-{size}-{'gc' if checkpointing else 'nogc'}-{ranks}r"
    config = {
        "backend": engine,
        "run_name": name,
        "output_dir": str(OUT / "runs" / name),
        "model": {"path": str(model_dir)},
        "data": {"train": {"type": "jsonl", "path": str(data)}},
        # verl's reference model needs page-locked memory, which a machine without a GPU has none of (its adapter
        # refuses a KL term on CPU): its rows train without one
        "algorithm": {"name": "grpo", "group_size": 4, "kl_coef": 0.0 if engine == "verl" else 0.01},
        "rollout": {"max_new_tokens": RESPONSE_TOKENS, "max_prompt_tokens": PROMPT_TOKENS},
        "reward": [{"name": "digit_match"}],
        "training": {
            "steps": 2,
            "batch_size": 4,
            "micro_batch_size": 8 // ranks,
            "lr": 1e-5,
            "gradient_checkpointing": checkpointing,
            "torch_threads": 2,
            "hang_first_step_s": 900,  # a stuck run gives the engine lock back
        },
        "resources": {"gpus_per_node": 0, **({"cpu_ranks_per_node": ranks} if ranks > 1 else {})},
        "telemetry": {"progress": False},
    }
    if engine == "verl":  # rlbridge's CPU plan sends weights in 16 MB buckets; a larger tensor needs a larger one
        config["backend_options"] = {
            "verl": {"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": VERL_BUCKET_MB}
        }
    import yaml

    path = OUT / "configs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------ one run
def predict(config_path: Path) -> tuple[dict[str, int], dict]:
    """The predicted peak of each process of the run (name -> bytes) and the machine's, without starting it."""
    from rlbridge.contract.memory_check import predict_run
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    prepared = prepare(load_config(config_path, []))
    prediction = predict_run(prepared.config, prepared.backend, prepared.plan, prepared.plan.layout)
    peaks = {name: peak for name, (_, peak) in prediction.process_peaks().items()}
    _, phase, node = prediction.worst()
    return peaks, {"machine": node, "phase": phase, "training_process": prediction.devices[0].processes[0].name}


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def smaps_pss(pid: int) -> int:
    """A process's proportional set size in bytes (its private pages, and its share of the pages it shares)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def measure(config_path: Path, log: Path) -> tuple[int, dict[int, dict]]:
    """Run `rlbridge train CONFIG` under the engine lock; every process's VmHWM (bytes) and command line."""
    cmd = ["flock", LOCK, str(REPO / ".venv" / "bin" / "rlbridge"), "train", str(config_path), "--no-progress"]
    seen: dict[int, dict] = {}
    started = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        stop = threading.Event()

        def sample() -> None:
            tick = 0
            while not stop.is_set():
                pids = [proc.pid, *descendants(proc.pid)]
                if tick % 5 == 0:  # the machine: every process's proportional set (shared pages counted once)
                    total = sum(smaps_pss(pid) for pid in pids)
                    seen.setdefault(0, {"hwm": 0, "cmd": "machine (sum of PSS)", "rss": []})
                    seen[0]["hwm"] = max(seen[0]["hwm"], total)
                tick += 1
                for pid in pids:
                    hwm = status_kb(pid, "VmHWM") * 1024
                    if hwm:
                        row = seen.setdefault(pid, {"hwm": 0, "cmd": "", "rss": []})
                        row["hwm"] = max(row["hwm"], hwm)
                        row["cmd"] = cmdline(pid) or row["cmd"]
                        row["rss"].append((round(time.time() - started, 1), status_kb(pid, "VmRSS") // 1024))
                stop.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        stop.set()
        sampler.join()
    return code, seen


LAUNCHERS = (
    "flock",
    "accelerate.commands.launch",
    "accelerate launch",
    "torch.distributed.run",
    "torchrun",
)  # they start a rank, they are none


def training_processes(engine: str, seen: dict[int, dict]) -> list[dict]:
    marks = TRAINING_PROCESS[engine]
    for mark in marks:  # the most specific mark first: accelerate's ranks before the engine process
        hits = [row for row in seen.values() if mark in row["cmd"] and not any(x in row["cmd"] for x in LAUNCHERS)]
        if hits:
            return hits
    return []


def run_row(engine: str, size: str, checkpointing: bool, ranks: int) -> dict:
    model = build_model(size, tied=engine not in UNTIED)
    data = build_data(model)
    config = write_config(engine, size, checkpointing, ranks, model, data)
    predicted, extra = predict(config)
    log = OUT / "logs" / f"{config.stem}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    code, seen = measure(config, log)
    machine = seen.pop(0, {"hwm": 0})["hwm"]
    trainers = training_processes(engine, seen)
    measured = max((t["hwm"] for t in trainers), default=0)
    row = {
        "engine": engine,
        "size": size,
        "checkpointing": checkpointing,
        "ranks": ranks,
        "exit": code,
        "wall_s": round(time.time() - started, 1),
        "predicted": predicted[extra["training_process"]],
        "measured": measured,
        "training_processes": len(trainers),
        "predicted_machine": extra["machine"],
        "measured_machine_pss": machine,
        "processes": sorted(({"hwm": r["hwm"], "cmd": r["cmd"][:120]} for r in seen.values()), key=lambda r: -r["hwm"])[
            :12
        ],
        "predicted_processes": predicted,
        "training_rss_mib": [t["rss"][:: max(len(t["rss"]) // 200, 1)] for t in trainers],
    }
    (OUT / "results").mkdir(parents=True, exist_ok=True)
    (OUT / "results" / f"{config.stem}.json").write_text(json.dumps(row, indent=2))
    return row


# ------------------------------------------------------------------------------------------------ the table
def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def table(rows: list[dict]) -> str:
    lines = [
        "| engine | model | checkpointing | ranks | predicted GiB | measured GiB | error | machine: predicted / "
        "measured GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['engine']} | {r['size']} | {'yes' if r['checkpointing'] else 'no'} | {r['ranks']} | "
        if r["exit"] is None:
            lines.append(f"{head}{gib(r['predicted'])} | not run | | |")
            continue
        if r["exit"] != 0 or not r["measured"]:
            lines.append(f"{head}{gib(r['predicted'])} | failed (exit {r['exit']}) | | |")
            continue
        error = (r["predicted"] - r["measured"]) / r["measured"]
        machine = r.get("measured_machine_pss")
        lines.append(
            f"{head}{gib(r['predicted'])} | {gib(r['measured'])} | {error:+.1%} | {gib(r['predicted_machine'])} / "
            + (f"{gib(machine)} |" if machine else "- |")
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="trl,verl")
    parser.add_argument("--sizes", default="10m,60m,250m")
    parser.add_argument("--checkpointing", default="no,yes")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--reuse", action="store_true", help="Reuse a row's saved result (runs/memory_fit/results).")
    parser.add_argument(
        "--saved-only", action="store_true", help="With --reuse: list a row without a saved result as not run."
    )
    parser.add_argument("--write", action="store_true", help="Write the table into docs/memory.md.")
    parser.add_argument("--predict-7b", action="store_true", help="Print the 7B predictions (no run).")
    args = parser.parse_args()
    if args.predict_7b:
        text = predict_7b()
        print(text)
        if args.write:
            write_block("<!-- memory-7b:start -->", "<!-- memory-7b:end -->", "`python benchmarks/memory_fit.py "
                        "--predict-7b --write`", text)  # fmt: skip
        return
    rows = []
    for engine in args.engines.split(","):
        for size in args.sizes.split(","):
            for ranks in (int(r) for r in args.ranks.split(",")):
                for gc in args.checkpointing.split(","):
                    checkpointing = gc == "yes"
                    name = f"{engine}-{size}-{'gc' if checkpointing else 'nogc'}-{ranks}r"
                    saved = OUT / "results" / f"{name}.json"
                    if args.reuse and saved.exists():  # the run's measurement, the model's prediction as it is now
                        row = json.loads(saved.read_text())
                        predicted, extra = predict(OUT / "configs" / f"{name}.yaml")
                        row.update(predicted=predicted[extra["training_process"]], predicted_machine=extra["machine"])
                        rows.append(row)
                        continue
                    if args.reuse and args.saved_only:
                        predicted, extra = predict(OUT / "configs" / f"{name}.yaml")
                        row = {"engine": engine, "size": size, "checkpointing": checkpointing, "ranks": ranks}
                        rows.append({**row, "predicted": predicted[extra["training_process"]], "exit": None})
                        continue
                    row = run_row(engine, size, checkpointing, ranks)
                    print(json.dumps({k: v for k, v in row.items() if k != "processes"}), flush=True)
                    rows.append(row)
    text = table(rows)
    print(text)
    if args.write:
        command = "python benchmarks/memory_fit.py " + " ".join(a for a in sys.argv[1:] if a != "--write")
        write_block(START, END, f"`{command.strip()}`", text)


def write_block(start: str, end: str, command: str, text: str) -> None:
    """Replace docs/memory.md's block between the `start` and `end` markers with `text` and the command."""
    doc = REPO / "docs" / "memory.md"
    head, rest = doc.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{command} ({time.strftime('%Y-%m-%d')}):\n\n{text}\n{end}{tail}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
