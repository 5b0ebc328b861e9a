"""The example workload the planner starts with (CLI defaults and the desktop form's first state):
a LoRA fine-tune of Llama 3.1 8B in bf16 on 50,000 samples of 2,048 tokens, one epoch, on an H100."""

MODEL = "llama-3.1-8b"
METHOD = "lora"
LORA_RANK = 16
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
PRECISION = "bf16-mixed"
OPTIMIZER = "adamw"
MICRO_BATCH = 4
GRAD_ACCUM = 4
SEQ_LEN = 2048
GRAD_CHECKPOINTING = "full"
ATTENTION = "sdpa"
SAMPLES = 50_000
GPU = "H100 SXM"
