"""A user's own script (tests): a tiny GPT-2 trained on CPU by a real ``transformers.Trainer`` with
GPU Planner's ``HFCallback``."""

import argparse

import gpuplanner_telemetry as gt
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--out", default="hf-out")
args = p.parse_args()

SEQ = 32
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=257))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 257, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


training = TrainingArguments(
    output_dir=args.out,
    max_steps=args.steps,
    per_device_train_batch_size=4,
    logging_steps=1,
    eval_strategy="steps",
    eval_steps=3,
    per_device_eval_batch_size=4,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
trainer = Trainer(
    model=model,
    args=training,
    train_dataset=Tokens(64),
    eval_dataset=Tokens(8),
    callbacks=[gt.HFCallback(seq_len=SEQ)],
)
trainer.train()
print("done", flush=True)
