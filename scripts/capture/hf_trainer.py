"""Hugging Face ``Trainer`` logs, for tests/fixtures/upstream/transformers-<version>/.

Run by ``scripts/capture-upstream transformers`` in a throwaway venv holding the pinned
transformers, torch (CPU) and accelerate: ``python hf_trainer.py OUT_DIR``. For each run it
starts itself again as the training job, stdout and stderr into one file as a job's log
(``> train.log 2>&1``, ``PYTHONUNBUFFERED=1`` as in most job images), and records
``trainer.state.log_history`` beside it: what each logged dict stood for.

The model is a tiny Llama built from a config (no download), trained on CPU for 6 steps
on made-up token ids; everything printed is Trainer's own (its dicts, its tqdm bar, its
final summary).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RUNS = {
    # file -> TrainingArguments beyond the common ones
    "train.log": {},
    "train_tokens_seen.log": {"include_num_input_tokens_seen": True},
}
STEPS, LOG_EVERY = 6, 2


def train(log_history: Path, extra: dict[str, Any]) -> None:
    """The training job (runs in the child, its output is the log)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config)

    class MadeUp(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict[str, Any]:
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, 128, (16,), generator=g)
            return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(16)}

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=STEPS,
            logging_steps=LOG_EVERY,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            seed=0,
            dataloader_num_workers=0,
            **extra,
        )
        trainer = Trainer(model=model, args=args, train_dataset=MadeUp())
        trainer.train()
    log_history.write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    history: dict[str, Any] = {}
    for name, extra in RUNS.items():
        with tempfile.NamedTemporaryFile(suffix=".json") as h, (out / name).open("wb") as log:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(
                [sys.executable, __file__, "--job", h.name, json.dumps(extra)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=900,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{name}: the training job failed; see {out / name}")
            history[name] = {"args": extra, "log_history": json.loads(Path(h.name).read_text())}
    (out / "log_history.json").write_text(json.dumps(history, indent=1, sort_keys=True) + "\n")
    print(
        f"Files: a tiny Llama from a config, {STEPS} steps on CPU, logging every {LOG_EVERY};"
        " stdout and stderr of the job in one file (PYTHONUNBUFFERED=1):\n"
    )
    print("- `train.log`: the default logging.")
    print("- `train_tokens_seen.log`: with `include_num_input_tokens_seen=True`.")
    print("- `log_history.json`: `trainer.state.log_history` of each run: what each dict meant.")


if __name__ == "__main__":
    if sys.argv[1] == "--job":
        train(Path(sys.argv[2]), json.loads(sys.argv[3]))
    else:
        main(Path(sys.argv[1]))
