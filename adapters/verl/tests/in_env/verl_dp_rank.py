"""One rank of the verl data-parallel equivalence test (test_verl_layout_in_env.py), run as a process of its own:
`python verl_dp_rank.py OUT_DIR WORLD RANK PORT [break]`.

The rank plans the test's config with rlbridge (resources.cpu_ranks_per_node WORLD on CPU), composes verl's
config from the plan as a run does, and builds verl's own actor worker (engine_workers.ActorRolloutRefWorker,
role actor: the FSDP2 engine on gloo, through patches/v09_cpu.py's CPU platform). It then runs verl's own
update step (RayPPOTrainer._update_actor: padding removal, the global mini batch, the epochs) on one fixed
batch, which verl's dispatch (_split_args_kwargs_data_proto) splits over the data-parallel ranks as its worker
group would. The batch is the same in every process: token ids, uneven response lengths, advantages and the
old log-probs (the initial model's, computed here with transformers) all come from fixed seeds, so the
experience is identical whatever WORLD is and the test compares the update alone. Rank 0 writes the
update's metrics and the updated weights (verl's full tensors, get_per_tensor_param) to OUT_DIR.

`break` scales verl's loss aggregation by the data-parallel size once more (the loss normalised twice over
the world size): the test's own check that it can fail.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[4]  # it runs as a script: adapters/verl/tests/in_env/ is 4 below
PROMPTS, GROUP, PROMPT_LEN, RESPONSE_LEN = 2, 8, 6, 10
LR = 0.5  # plain SGD (Adam's first step is the gradient's sign: blind to its scale)


def overrides(world: int) -> list[str]:
    return [
        "backend=verl",
        "engine_version=0.9.1",
        "resources.gpus_per_node=0",
        f"resources.cpu_ranks_per_node={world}",
        "model.path=builtin:tiny-bpe",
        f"training.batch_size={PROMPTS}",
        f"algorithm.group_size={GROUP}",
        f"training.mini_batch_size={PROMPTS * GROUP}",  # one update of the whole batch
        "training.micro_batch_size=2",  # 8 micro batches on one rank, 4 on each of two
        f"training.lr={LR}",
        "training.weight_decay=0",
        "training.grad_clip=null",
        "training.torch_threads=1",
        "algorithm.kl_coef=0",
        "algorithm.loss_aggregation=token_mean",
        "backend_options.verl.actor_rollout_ref.actor.optim.optimizer=SGD",
    ]


def fixed_batch(model_dir: str):
    """The experience: every process builds the same one (seeded), old log-probs from the initial model."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl import DataProto

    gen = torch.Generator().manual_seed(1234)
    rows = PROMPTS * GROUP
    vocab = 300  # tiny-bpe's 320 tokens, special ones left out
    prompts = torch.randint(3, vocab, (PROMPTS, PROMPT_LEN), generator=gen).repeat_interleave(GROUP, dim=0)
    responses = torch.randint(3, vocab, (rows, RESPONSE_LEN), generator=gen)
    lengths = torch.randint(2, RESPONSE_LEN + 1, (rows,), generator=gen)  # uneven: the token-mean is global
    response_mask = (torch.arange(RESPONSE_LEN)[None, :] < lengths[:, None]).long()
    responses = responses * response_mask  # padding id 0 after each response's end
    input_ids = torch.cat([prompts, responses], dim=1)
    attention_mask = torch.cat([torch.ones(rows, PROMPT_LEN, dtype=torch.long), response_mask], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.randn(rows, generator=gen)[:, None].expand(rows, RESPONSE_LEN) * response_mask
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa")
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logp = torch.log_softmax(logits[:, PROMPT_LEN - 1 : -1].float(), dim=-1)
    old_log_probs = logp.gather(-1, responses[..., None]).squeeze(-1) * response_mask
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": response_mask,
            "old_log_probs": old_log_probs,
            "advantages": advantages.contiguous(),
        },
        meta_info={"temperature": 1.0},
    )
    return batch, initial


def main(out_dir: str, world: int, rank: int, port: int, breaks: bool) -> None:
    from rlbridge.contract.models import materialize_model
    from rlbridge.engine.patches import apply_patches
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare
    from rlbridge_adapters.verl.patches import PATCHES
    from rlbridge_adapters.verl.validate import compose, overrides_for

    prepared = prepare(load_config(REPO / "configs" / "quickstart.yaml", overrides(world)))
    native = prepared.plan.native
    model_dir = materialize_model(prepared.config)
    os.environ.update(native["env"])  # the CPU platform's variables (VERL_PLATFORM=cpu ...), as a run sets them
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    apply_patches(PATCHES, native)
    import torch

    torch.manual_seed(0)
    cfg = compose(overrides_for(native, out_dir, model_dir, max_prompt_length=PROMPT_LEN))
    batch, initial = fixed_batch(model_dir)

    if breaks:
        from verl.trainer.ppo import core_algos

        original = core_algos.agg_loss

        def agg_loss(*args, **kwargs):  # the loss normalised over the world size twice
            return original(*args, **kwargs) * kwargs.get("dp_size", 1)

        core_algos.agg_loss = agg_loss

    from verl.single_controller.base.decorator import _split_args_kwargs_data_proto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.workers.engine_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
    worker.init_model()

    class WorkerGroup:
        """This process's share of verl's worker group: its dispatch's chunk of the batch for this rank."""

        def update_actor(self, data):
            (chunks,), _ = _split_args_kwargs_data_proto(world, data)
            # Ray hands each worker its chunk as a fresh (unpickled, so unlocked) TensorDict
            return worker.update_actor(pickle.loads(pickle.dumps(chunks[rank])))

    trainer = SimpleNamespace(config=cfg, actor_rollout_wg=WorkerGroup(), distillation_config=None)
    output = RayPPOTrainer._update_actor(trainer, batch)
    metrics = output.meta_info["metrics"]
    params = worker.actor.engine.get_per_tensor_param()
    params = params[0] if isinstance(params, tuple) else params
    weights = {name: tensor.detach().cpu().clone() for name, tensor in params}  # a collective: every rank
    if rank == 0:
        (Path(out_dir) / "metrics.json").write_text(json.dumps(metrics, default=float))
        torch.save({"after": weights, "before": initial}, Path(out_dir) / "weights.pt")
        layout = {
            "world": torch.distributed.get_world_size(),
            "backend": torch.distributed.get_backend(),
            "dp": worker.actor.engine.get_data_parallel_size(),
            "strategy": cfg.actor_rollout_ref.actor.strategy,
            "ppo_micro_batch_size_per_gpu": cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu,
        }
        (Path(out_dir) / "layout.json").write_text(json.dumps(layout))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    out, world_size, rank_, port_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    main(out, world_size, rank_, port_, "break" in sys.argv[5:])
