"""The quickstart written directly against TRL, without rlbridge (the baseline of overhead.py).

Same model directory, same rows, same reward, same GRPOConfig as `rlbridge plan configs/quickstart.yaml`.
Prints one JSON line per step: {"step": n, "reward": r}.
"""

import json
import random
import sys

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

model_dir, output_dir = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)

rng = random.Random(0)
rows = []
for _ in range(2048):
    digit = str(rng.randrange(10))
    rows.append({"prompt": digit * 4, "answer": digit})


def digit_match(prompts, completions, completion_ids, answer, **kwargs):
    return [
        min(c.count(a), max(len(ids), 1)) / max(len(ids), 1) for c, ids, a in zip(completions, completion_ids, answer)
    ]


class PrintReward(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            print(json.dumps({"step": state.global_step, "reward": logs["reward"]}), flush=True)


args = GRPOConfig(
    output_dir=output_dir,
    max_steps=150,
    learning_rate=5e-3,
    lr_scheduler_type="constant",
    weight_decay=0.0,
    per_device_train_batch_size=64,
    gradient_accumulation_steps=1,
    generation_batch_size=64,
    num_generations=8,
    num_iterations=1,
    max_completion_length=16,
    temperature=1.0,
    top_p=1.0,
    top_k=0,
    beta=0.0,
    epsilon=0.2,
    max_grad_norm=1.0,
    seed=0,
    data_seed=0,
    logging_steps=1,
    report_to="none",
    disable_tqdm=True,
    save_strategy="no",
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    model_init_kwargs={"dtype": "float32"},
    loss_type="dapo",
    scale_rewards="group",
    remove_unused_columns=False,
)
trainer = GRPOTrainer(
    model=model_dir,
    reward_funcs=[digit_match],
    args=args,
    train_dataset=Dataset.from_list(rows),
    processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
    callbacks=[PrintReward()],
)
trainer.remove_callback(PrinterCallback)
trainer.train()
