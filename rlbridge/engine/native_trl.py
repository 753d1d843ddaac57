"""A bench arm of kind `native` on TRL: the plan's GRPOConfig/RLOOConfig run by TRL's own trainer in a
plain script, with no rlbridge runner, run context, metrics callback, patches or plot around it
(what a user writing against TRL directly would run). It measures rlbridge's overhead.

`python -m rlbridge.engine.native_trl JOB.json OUT_DIR`. JOB.json (written by rlbridge.run.bench) holds
the plan, the model directory and the training rows, so this process reads no rlbridge config. The
reward is the same reward function, called through the few lines a TRL user writes. One line per
step goes to OUT_DIR/metrics.jsonl (step, reward/mean, timing/step_s), the native script's own log.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    job = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    native = job["plan"]["native"]

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, PreTrainedTokenizerFast, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    if native.get("torch_threads"):
        torch.set_num_threads(native["torch_threads"])
    model_dir = job["model_dir"]
    tok = (PreTrainedTokenizerFast if (Path(model_dir) / "tokenizer.json").exists() else AutoTokenizer).from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    data = native["data"]
    records = []
    for row in job["rows"]:
        record = {k: v for k, v in row.items() if k != data["prompt_key"]}
        text = row[data["prompt_key"]]
        record["prompt"] = [{"role": "user", "content": text}] if data["use_chat_template"] else text
        records.append(record)

    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.contract.rewards import RewardInput

    pm = get_plugin_manager()
    reward_funcs = []
    for spec in job["reward"]:
        fn = pm.get("reward", spec["name"], "reward").factory(**spec.get("args", {}))

        def reward(prompts, completions, completion_ids, _fn=fn, **columns):
            answers = columns.get(data["answer_key"]) or [None] * len(prompts)
            return _fn([RewardInput(p, c, list(i), a) for p, c, i, a in zip(prompts, completions, completion_ids, answers)])

        reward.__name__ = spec["name"]
        reward_funcs.append(reward)

    per_step = native["updates_per_step"]

    class StepLog(TrainerCallback):
        started = None

        def on_step_begin(self, args, state, control, **kwargs):
            if self.started is None:
                self.started = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs or self.started is None:
                return
            row = {"step": state.global_step // per_step, "reward/mean": logs["reward"],
                   "timing/step_s": time.perf_counter() - self.started}
            if "completions/mean_length" in logs:
                row["response_length/mean"] = logs["completions/mean_length"]
            self.started = None
            with open(out / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")

    args = getattr(trl, native["config_class"])(**native["args"])
    trainer = getattr(trl, native["trainer"])(
        model=model_dir, reward_funcs=reward_funcs, args=args, train_dataset=Dataset.from_list(records),
        processing_class=tok, callbacks=[StepLog()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1:])
