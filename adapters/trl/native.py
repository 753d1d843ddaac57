"""A bench arm of kind `native` on TRL: the plan's GRPOConfig/RLOOConfig run by TRL's own trainer in a
plain script, with no rlbridge runner, run context, metrics callback, patches or plot around it
(what a user writing against TRL directly would run). It measures rlbridge's overhead.

The bench's three sub-commands (`Backend.native_arm`), run with the engine environment's Python:

- `prepare JOB.json OUT_DIR` (not timed): the job with the trainer's output directory under OUT_DIR,
  and OUT_DIR/native_cmd.json, the command to time: `run` below.
- `run JOB.json OUT_DIR`: JOB.json (written by rlbridge.bench.arms) holds the plan, the model directory
  and the training rows, so this process reads no rlbridge config. The reward is the same reward
  function, called through the few lines a TRL user writes. One line per step goes to
  OUT_DIR/steps.jsonl (step, reward/mean, timing/step_s), the native script's own log.
- `canonical RAW OUT`: that log is canonical already; copied to OUT.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path


def prepare(job_path: Path, out: Path) -> None:
    job = json.loads(job_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    job["plan"]["native"]["args"]["output_dir"] = str((out / "trainer").absolute())
    trl_job = out / "trl_job.json"
    trl_job.write_text(json.dumps(job))
    cmd = {
        "argv": [sys.executable, "-m", __spec__.name, "run", str(trl_job), str(out)],
        "env": {},
        "metrics": str(out / "steps.jsonl"),
        "cwd": os.getcwd(),
    }
    (out / "native_cmd.json").write_text(json.dumps(cmd, indent=1))


def canonical(raw: Path, out: Path) -> None:
    shutil.copyfile(raw, out)


def run(job_path: Path, out: Path) -> None:
    job = json.loads(job_path.read_text())
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
    tok = (PreTrainedTokenizerFast if (Path(model_dir) / "tokenizer.json").exists() else AutoTokenizer).from_pretrained(
        model_dir
    )
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
            return _fn(
                [RewardInput(p, c, list(i), a) for p, c, i, a in zip(prompts, completions, completion_ids, answers)]
            )

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
            row = {
                "step": state.global_step // per_step,
                "reward/mean": logs["reward"],
                "timing/step_s": time.perf_counter() - self.started,
            }
            if "completions/mean_length" in logs:
                row["response_length/mean"] = logs["completions/mean_length"]
            self.started = None
            with open(out / "steps.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")

    args = getattr(trl, native["config_class"])(**native["args"])
    trainer = getattr(trl, native["trainer"])(
        model=model_dir,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(records),
        processing_class=tok,
        callbacks=[StepLog()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()


def main(argv: list[str]) -> None:
    commands = {"prepare": prepare, "run": run, "canonical": canonical}
    if len(argv) != 3 or argv[0] not in commands:
        raise SystemExit(f"usage: python -m {__spec__.name} prepare|run|canonical PATH PATH")
    commands[argv[0]](Path(argv[1]), Path(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
