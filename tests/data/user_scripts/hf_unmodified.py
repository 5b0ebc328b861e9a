"""A user's own script (tests) that knows nothing of GPU Planner: a tiny Llama-style model built from the
``config.json`` in ``--model-dir``, trained on CPU by a plain ``transformers.Trainer`` (no callback, no
import of ``gpuplanner_telemetry``)."""

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--model-dir", required=True)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--out", default="hf-out")
args = p.parse_args()

SEQ, BATCH = 32, 4
torch.manual_seed(0)
config = AutoConfig.from_pretrained(args.model_dir)
model = AutoModelForCausalLM.from_config(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, config.vocab_size, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


training = TrainingArguments(
    output_dir=args.out,
    max_steps=args.steps,
    per_device_train_batch_size=BATCH,
    logging_steps=2,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
Trainer(model=model, args=training, train_dataset=Tokens(64)).train()
print("done", flush=True)
