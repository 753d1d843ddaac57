"""Placement and weight sync on one GPU with torch and transformers only (no vLLM, no Ray, no hub):
the numbers issue 16 asks for where an engine's vLLM rollout cannot run (docs/performance.md).

A model of Qwen2.5-0.5B's shape (random weights, built in memory) trains with a REINFORCE-style step on
its own HF-generated samples, in two layouts on the one device:
- colocate: the policy samples itself (what rlbridge's HF rollout does): nothing to sync;
- split: a second copy of the model samples (a rollout engine with weights of its own), and the
  policy's weights are synced into it after every step.
For the split layout each sync is timed (CUDA-synchronised) for four transfers:
- per_tensor: one copy per tensor (the engines' default: TRL's load_weights per parameter, OpenRLHF's
  per-tensor broadcast);
- bucketed: tensors grouped into buckets of --bucket-mb and copied with one foreach call per bucket
  (verl's bucketed update);
- host_round_trip: per tensor through pinned host memory (what a transfer to another process costs);
- changed_only: rlbridge's sync_changed plugin (plugins/sync_changed.py) with only q_proj/v_proj
  trainable (LoRA-like): only the tensors that changed are sent.
Also: sampling tokens/s and peak memory in each layout.

Usage:
    python benchmarks/gpu_weight_sync.py                      # on a CUDA GPU; writes docs/performance.md
    python benchmarks/gpu_weight_sync.py --device cpu --small --steps 2 --no-write   # a dry run on CPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
START, END = "<!-- gpu-weight-sync:start -->", "<!-- gpu-weight-sync:end -->"
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}


def build(shape: dict, dtype, device):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(**shape, pad_token_id=0, eos_token_id=1, bos_token_id=None))
    return model.to(device=device, dtype=dtype)


def sync(kind: str, policy, sampler, bucket_bytes: int, last: dict) -> tuple[int, int]:
    """Copy the policy's weights into the sampler; returns (bytes, tensors) sent."""
    import torch

    from rlbridge_plugins.sync_changed import changed_only

    target = dict(sampler.named_parameters())
    pairs = [(n, p.detach()) for n, p in policy.named_parameters()]
    if kind == "changed_only":
        pairs = list(changed_only(pairs, last))
    sent = sum(p.numel() * p.element_size() for _, p in pairs)
    with torch.no_grad():
        if kind in ("per_tensor", "changed_only"):
            for name, tensor in pairs:
                target[name].copy_(tensor, non_blocking=True)
        elif kind == "host_round_trip":
            for name, tensor in pairs:
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=tensor.is_cuda)
                host.copy_(tensor)
                target[name].copy_(host, non_blocking=True)
        elif kind == "bucketed":
            bucket, size = [], 0
            for name, tensor in pairs:
                bucket.append((target[name], tensor))
                size += tensor.numel() * tensor.element_size()
                if size >= bucket_bytes:
                    torch._foreach_copy_([d for d, _ in bucket], [s for _, s in bucket])
                    bucket, size = [], 0
            if bucket:
                torch._foreach_copy_([d for d, _ in bucket], [s for _, s in bucket])
        else:
            raise ValueError(kind)
    return sent, len(pairs)


def step(
    policy, sampler, optimizer, batch: int, prompt_len: int, new_tokens: int, vocab: int, device
) -> tuple[float, int]:
    """Sample with `sampler`, one policy-gradient step on `policy`; returns (sampling seconds, tokens)."""
    import torch

    prompts = torch.randint(2, vocab, (batch, prompt_len), device=device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = sampler.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            pad_token_id=0,
        )
    _sync(device)
    sample_s = time.perf_counter() - t0
    logits = policy(out).logits[:, prompt_len - 1 : -1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, out[:, prompt_len:, None]).squeeze(-1)
    advantage = torch.randn(batch, 1, device=device)
    loss = -(advantage * logp).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return sample_s, batch * new_tokens


def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _peak_mb(device) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if str(device).startswith("cuda") else None


def layout_run(layout: str, kind: str | None, args, shape: dict, dtype, device) -> dict:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    policy = build(shape, dtype, device)
    if kind == "changed_only":  # LoRA-like: only the attention q/v projections train
        for name, p in policy.named_parameters():
            p.requires_grad_(any(t in name for t in ("q_proj", "v_proj")))
    sampler = policy if layout == "colocate" else build(shape, dtype, device)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5)
    last: dict = {}
    if kind == "changed_only":
        sync(kind, policy, sampler, args.bucket_mb << 20, last)  # the first sync sends everything
    sample_s, tokens, syncs = [], 0, []
    for _ in range(args.steps):
        s, n = step(
            policy, sampler, optimizer, args.batch, args.prompt_len, args.new_tokens, shape["vocab_size"], device
        )
        sample_s.append(s)
        tokens += n
        if kind is not None:
            _sync(device)
            t0 = time.perf_counter()
            sent, count = sync(kind, policy, sampler, args.bucket_mb << 20, last)
            _sync(device)
            syncs.append((time.perf_counter() - t0, sent, count))
    result = {
        "layout": layout,
        "transfer": kind or "-",
        "params": sum(p.numel() for p in policy.parameters()),
        "sample_tok_s": round(tokens / sum(sample_s), 1),
        "peak_mb": round(_peak_mb(device), 0) if _peak_mb(device) is not None else None,
    }
    if syncs:
        times = [t for t, _, _ in syncs[1:]] or [syncs[0][0]]  # the first timed sync warms the allocator
        result.update(
            sync_ms=round(1000 * statistics.median(times), 3),
            sync_bytes=syncs[-1][1],
            sync_tensors=syncs[-1][2],
            sync_gb_s=round(syncs[-1][1] / statistics.median(times) / 1e9, 2) if statistics.median(times) > 0 else None,
        )
    del policy, sampler, optimizer
    return result


def markdown(results: list[dict], env: dict, command: str) -> str:
    lines = [
        START,
        f"### Weight sync, one device (HF rollout, no vLLM): {env['date']}",
        "",
        f"`{command}` on {env['device']} (torch {env['torch']}, transformers {env['transformers']}); model: "
        f"{env['model']}, "
        f"{env['params_m']}M parameters, {env['dtype']}; batch {env['batch']}, {env['new_tokens']} new tokens, "
        f"{env['steps']} steps per row. "
        "Sync time is the median over steps after the first.",
        "",
        "| layout | transfer | sync (ms) | bytes per sync | tensors | GB/s | sampling tok/s | peak MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['layout']} | {r['transfer']} | {r.get('sync_ms', '-')} | {r.get('sync_bytes', 0):,} | "
            f"{r.get('sync_tensors', '-')} | "
            f"{r.get('sync_gb_s', '-')} | {r['sample_tok_s']} | {r['peak_mb'] if r['peak_mb'] is not None else '-'} |"
        )
    lines.append(END)
    return "\n".join(lines)


def write_doc(path: Path, block: str) -> None:
    text = path.read_text() if path.exists() else "# Performance\n"
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n## Placement and weight sync on one GPU (issue 16)\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="a tiny model (dry runs on CPU)")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU by default")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--bucket-mb", type=int, default=64)
    parser.add_argument("--doc", type=Path, default=REPO / "docs" / "performance.md")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    import torch
    import transformers

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu --small --no-write for a dry run")
    from rlbridge_plugins.models import QWEN25_05B

    shape = SMALL if args.small else {k: v for k, v in QWEN25_05B.items()}
    dtype = (
        getattr(torch, args.dtype)
        if args.dtype
        else (torch.bfloat16 if args.device.startswith("cuda") else torch.float32)
    )
    runs = [
        ("colocate", None),
        ("split", "per_tensor"),
        ("split", "bucketed"),
        ("split", "host_round_trip"),
        ("split", "changed_only"),
    ]
    results = []
    for layout, kind in runs:
        result = layout_run(layout, kind, args, shape, dtype, args.device)
        print(json.dumps(result), flush=True)
        results.append(result)
    env = {
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else f"CPU ({platform.processor() or platform.machine()})",
        "model": "tiny Qwen2" if args.small else "Qwen2.5-0.5B shape, random weights",
        "params_m": round(results[0]["params"] / 1e6, 1),
        "dtype": str(dtype).removeprefix("torch."),
        "batch": args.batch,
        "new_tokens": args.new_tokens,
        "steps": args.steps,
    }
    block = markdown(results, env, "python " + " ".join(["benchmarks/gpu_weight_sync.py", *sys.argv[1:]]))
    print(block)
    if not args.no_write:
        write_doc(args.doc, block)
        print(f"written to {args.doc}")


if __name__ == "__main__":
    main()
