"""The memory model on one GPU (issue 43, docs/memory.md): each phase of a GRPO step measured with
torch.cuda.max_memory_allocated against rlbridge.contract.memory's prediction for it, with torch and transformers
only (no vLLM, no Ray, no hub), in well under 10 minutes on one H200.

For three random models of Qwen2.5's shapes (0.5B, 1.5B, 3B; built on the device, bf16), with and without
gradient checkpointing, one step of the loop TRL runs on one GPU with HF generate, in plain torch so that each
phase can be measured alone:
- generate: `model.generate` of the step's samples (HF's KV cache);
- log_probs: the reference model's forward over the samples in micro batches (no grad);
- backward: the policy's forward and backward over two micro batches (gradients accumulate);
- optimizer: AdamW (fused) on the bf16 parameters (its moments in bf16, as transformers' Trainer keeps them).
The loss's log-probs come from the logits of the response positions, upcast to fp32 and log-softmaxed (declared
below as this loop's Logits: scope response, no tiling). Each phase starts from torch.cuda.reset_peak_memory_stats;
its peak is compared with the prediction's total for that phase less the declared runtime (the CUDA context is not
in max_memory_allocated). Prints a Markdown table; --write puts it in docs/memory.md.

Usage:
    python benchmarks/gpu_memory_fit.py                    # on a CUDA GPU
    python benchmarks/gpu_memory_fit.py --device cpu --small --no-write   # a dry run of the code on CPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
START, END = "<!-- gpu-memory-fit:start -->", "<!-- gpu-memory-fit:end -->"
SHAPES = {  # Qwen2.5's config.json shapes (tied embeddings at these sizes)
    "0.5B": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936},
    "1.5B": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936},
    "3B": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
           "num_key_value_heads": 2, "vocab_size": 151936},
}  # fmt: skip
SMALL = {"tiny": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "vocab_size": 512}}  # fmt: skip
PROMPT, RESPONSE, PROMPTS, GROUP, MICRO = 256, 512, 4, 8, 8


def build(shape: dict, device: str, dtype):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=4096, pad_token_id=0,
                      eos_token_id=1, bos_token_id=None, attn_implementation="sdpa")  # fmt: skip
    with torch.device(device):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).to(dtype)
    return cfg, model


def predicted(cfg, checkpointing: bool, dtype_name: str, device_bytes: int) -> tuple[dict[str, int], int]:
    """The prediction for each phase of this loop (less the declared runtime) and the parameter count."""
    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.memory import DTYPE_BYTES, Logits, MemoryBehaviour, predict, shape_from_config

    s = DTYPE_BYTES[dtype_name]
    config = RunConfig.model_validate(
        {
            "backend": "trl",
            "algorithm": {"name": "grpo", "group_size": GROUP, "kl_coef": 0.01},
            "rollout": {"max_new_tokens": RESPONSE, "max_prompt_tokens": PROMPT},
            "training": {"batch_size": PROMPTS, "micro_batch_size": MICRO, "gradient_checkpointing": checkpointing},
            "resources": {"gpus_per_node": 1},
            "model": {"dtype": dtype_name},
            "reward": [{"name": "digit_match"}],
        }
    )
    behaviour = MemoryBehaviour(
        engine="torch loop (TRL's one-GPU step)",
        training_process="this process",
        param_bytes=s,
        grad_bytes=s,
        optimizer_bytes=2 * s,
        compute_bytes=s,
        reference="trainer",
        reference_bytes=s,
        rollout="hf",
        kv_bytes=s,
        logits=Logits(scope="response", backward_copies=3.5, forward_copies=2.5),
    )
    shape = shape_from_config(cfg.to_dict())
    prediction = predict(config, shape, behaviour, {"actor": 1, "rollout": 1, "shared": True}, PROMPT, device_bytes,
                         "torch", gpus=1)  # fmt: skip
    process = prediction.devices[0].processes[0]
    return {phase: process.in_phase(phase) for phase in prediction.phases}, shape.parameters


def step(model, ref, checkpointing: bool, device: str) -> dict[str, int]:
    """One GRPO step, phase by phase; each phase's peak allocated bytes."""
    import torch

    cuda = device.startswith("cuda")
    peaks: dict[str, int] = {}

    def measure(phase, fn):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        out = fn()
        if cuda:
            torch.cuda.synchronize()
            peaks[phase] = torch.cuda.max_memory_allocated()
        return out

    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    vocab = model.config.vocab_size
    prompts = torch.randint(2, vocab, (PROMPTS * GROUP, PROMPT), device=device)

    def generate():
        with torch.no_grad():
            model.eval()
            out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=RESPONSE,
                                 min_new_tokens=RESPONSE, do_sample=True, pad_token_id=0)  # fmt: skip
            model.train()
            return out

    sequences = measure("generate", generate)

    def logps(m, seq):
        logits = m(input_ids=seq, use_cache=False).logits[:, PROMPT - 1 : -1].float()
        return torch.gather(logits.log_softmax(-1), -1, seq[:, PROMPT:].unsqueeze(-1)).squeeze(-1)

    def reference():
        with torch.no_grad():
            return torch.cat([logps(ref, sequences[i : i + MICRO]) for i in range(0, len(sequences), MICRO)])

    ref_logps = measure("log_probs", reference)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=cuda)

    def backward():
        for i in range(0, 2 * MICRO, MICRO):
            new = logps(model, sequences[i : i + MICRO])
            loss = (new - ref_logps[i : i + MICRO]).pow(2).mean()
            loss.backward()

    measure("backward", backward)
    measure("optimizer", optimizer.step)
    optimizer.zero_grad(set_to_none=True)
    # the second step's backward and update: the optimizer states now exist (the steady state)
    measure("backward", backward)
    measure("optimizer", optimizer.step)
    optimizer.zero_grad(set_to_none=True)
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="A tiny model (a dry run of the code).")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import torch

    dtype_name = "bfloat16" if args.device.startswith("cuda") else "float32"
    dtype = getattr(torch, dtype_name)
    device_bytes = torch.cuda.get_device_properties(0).total_memory if args.device.startswith("cuda") else 0
    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    rows = []
    for name, shape in (SMALL if args.small else SHAPES).items():
        for checkpointing in (False, True):
            started = time.time()
            cfg, model = build(shape, args.device, dtype)
            _, ref = build(shape, args.device, dtype)
            ref.requires_grad_(False)
            peaks = step(model, ref, checkpointing, args.device)
            expected, params = predicted(cfg, checkpointing, dtype_name, device_bytes)
            for phase, peak in peaks.items():
                rows.append({"model": name, "parameters": params, "checkpointing": checkpointing, "phase": phase,
                             "predicted": expected[phase], "measured": peak})  # fmt: skip
            print(json.dumps({"model": name, "checkpointing": checkpointing, "s": round(time.time() - started, 1),
                              "peaks": peaks, "predicted": expected}), flush=True)  # fmt: skip
            del model, ref
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    lines = ["| model | checkpointing | phase | predicted GiB | measured GiB | error |", "|---|---|---|---|---|---|"]
    for r in rows:
        if not r["measured"]:
            continue
        error = (r["predicted"] - r["measured"]) / r["measured"]
        lines.append(f"| {r['model']} | {'yes' if r['checkpointing'] else 'no'} | {r['phase']} | "
                     f"{r['predicted'] / 2**30:.2f} | {r['measured'] / 2**30:.2f} | {error:+.1%} |")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    if not args.no_write and args.device.startswith("cuda"):
        doc = REPO / "docs" / "memory.md"
        text = doc.read_text()
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        stamp = (
            f"`python benchmarks/gpu_memory_fit.py` on one {gpu}, torch {torch.__version__}, {datetime.date.today()}"
        )
        doc.write_text(f"{head}{START}\n{stamp}:\n\n{table}\n{END}{tail}")


if __name__ == "__main__":
    main()
