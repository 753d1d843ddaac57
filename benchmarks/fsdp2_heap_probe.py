"""How much of a CPU rank's peak is glibc's heap under FSDP2 on gloo, as verl 0.9.1 builds and steps its actor
(docs/memory.md, "Where the model is weaker": the collectives on several CPU ranks).

The same wrap (each decoder layer, the embedding and the output layer, then the root), MixedPrecisionPolicy (bf16
parameters, fp32 reduction), load (rank 0 builds the fp32 model, the others on the meta device, then
set_model_state_dict broadcasts it: verl/utils/fsdp_utils.py fsdp2_load_full_state_dict), torch AdamW, and two
steps of a forward-only pass and two micro batches of 4 x 128 tokens with a log-softmax loss, then the weights
gathered tensor by tensor as the sync does. Each rank records its resident set, its high-water mark and glibc's
mallinfo2 after every phase. Run it in verl's environment, once as it is and once with every freed block returned
at once (MALLOC_MMAP_THRESHOLD_=131072): the difference of the peaks is what the heap keeps.

    flock /tmp/rlbridge-engine.lock ~/.cache/rlbridge/envs/verl-0.9.1/bin/python benchmarks/fsdp2_heap_probe.py \\
        runs/memory_fit/models/60m-untied 2
    MALLOC_MMAP_THRESHOLD_=131072 flock /tmp/rlbridge-engine.lock ... (the same)
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

PHASE_TOKENS = (4, 128)  # one rank's micro batch: 4 samples of 64 + 64 tokens, as benchmarks/memory_fit.py's rows


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def status(phase: str) -> dict:
    """The process's resident set and high-water mark (MiB) and glibc's heap: in use, free but kept, mmapped."""
    row: dict = {"phase": phase}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "VmHWM"):
                row[key] = int(value.split()[0]) // 1024
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    row.update(heap_in_use=info.uordblks >> 20, heap_free=info.fordblks >> 20, mmapped=info.hblkhd >> 20)
    return row


def rank_main(rank: int, model_dir: str, world: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from accelerate import init_empty_weights
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import AutoConfig, AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PROBE_PORT", "29561"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    log = [status("start")]
    config = AutoConfig.from_pretrained(model_dir)
    with init_empty_weights() if rank != 0 else torch.device("cpu"):
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, config=config)
    log.append(status("loaded"))
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    kwargs = {"mesh": mesh, "mp_policy": policy, "reshard_after_forward": True}
    full = model.state_dict()
    for name, module in model.named_modules():  # verl/utils/fsdp_utils.py apply_fsdp2, untied
        if type(module).__name__.endswith("DecoderLayer") or isinstance(module, torch.nn.Embedding):
            fully_shard(module, **kwargs)
        elif name.endswith("lm_head"):
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    model = model.to("cpu") if rank == 0 else model.to_empty(device="cpu")
    options = StateDictOptions(full_state_dict=True, cpu_offload=False, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=options)
    for _, buffer in sorted(model.named_buffers(), key=lambda item: item[0]):
        dist.broadcast(buffer, src=0)
    del full
    log.append(status("built"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
    generator = torch.Generator().manual_seed(rank)
    for step in range(2):
        batches = [torch.randint(0, config.vocab_size, PHASE_TOKENS, generator=generator) for _ in range(2)]
        with torch.no_grad():
            for ids in batches:
                torch.log_softmax(model(input_ids=ids, use_cache=False).logits.float(), -1)
        log.append(status(f"step {step} log-probs"))
        for ids in batches:
            logits = model(input_ids=ids, use_cache=False).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])
            (-logp.mean() / len(batches)).backward()
            del logits, logp
            log.append(status(f"step {step} backward"))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if isinstance(norm, DTensor):
            norm.full_tensor()
        optimizer.step()
        optimizer.zero_grad()
        log.append(status(f"step {step} optimizer"))
        for tensor in model.state_dict().values():  # the weight sync: one gathered tensor at a time
            tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        log.append(status(f"step {step} sync"))
    with open(f"{out}.rank{rank}.json", "w") as fh:
        json.dump(log, fh)
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing

    model_dir, world = sys.argv[1], int(sys.argv[2])
    out = sys.argv[3] if len(sys.argv) > 3 else "/tmp/fsdp2_heap_probe"
    torch.multiprocessing.spawn(rank_main, args=(model_dir, world, out), nprocs=world)
    for rank in range(world):
        with open(f"{out}.rank{rank}.json") as fh:
            log = json.load(fh)
        loaded = log[1]["VmRSS"]
        peak = max(row["VmHWM"] for row in log[2:])
        print(f"rank {rank}: libraries {loaded} MiB, peak {peak} MiB, heap kept at the end {log[-1]['heap_free']} MiB")
        for row in log:
            print(f"  {row['phase']:20s} rss {row['VmRSS']:6d}  hwm {row['VmHWM']:6d}  heap in use "
                  f"{row['heap_in_use']:6d}  free {row['heap_free']:6d}  mmapped {row['mmapped']:6d}")  # fmt: skip


if __name__ == "__main__":
    main()
