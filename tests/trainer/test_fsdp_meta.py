"""Issue 17 item 7: FSDP meta-device initialisation with a sharded load. Every rank builds the model
on the meta device, shards it, and materialises only its shard from the weights rank 0 loads; the
rotary embeddings (non-persistent buffers) come out right, so the loss is the ordinary load's."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, read_events, trainer_env
from trainer import fsdp as fsdp_mod
from trainer.data import ByteTokenizer
from trainer.model import build_model

TINY_LLAMA = dict(
    vocab_size=257,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    bos_token_id=256,
    eos_token_id=256,
)


@pytest.fixture
def llama_dir(tmp_path: Path) -> Path:
    """A tiny Llama-style checkpoint (rotary embeddings, untied head) saved as Hugging Face saves one."""
    import transformers

    torch.manual_seed(11)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_LLAMA))
    path = tmp_path / "tiny-llama"
    model.save_pretrained(path, safe_serialization=True)
    ByteTokenizer().save_pretrained(path)  # as the trainer saves a config-built model: bytes, said so
    return path


def _args(run: Path, llama_dir: Path, **overrides: object) -> dict:
    """The trainer's arguments for the saved checkpoint at ``llama_dir`` (``--model``, no ``--model-config``)."""
    args = base_args(run, llama_dir, **overrides)
    args.update(model_config=None, model=str(llama_dir))
    return args


def test_a_meta_model_holds_no_weights_and_names_its_computed_buffers(tmp_path: Path, llama_dir: Path) -> None:
    from trainer.config import TrainConfig, validate

    config = TrainConfig(**_args(tmp_path / "r", llama_dir, precision="fp32"))
    validate(config)
    meta = build_model(config, 257, 256, meta=True)
    real = build_model(config, 257, 256)
    assert all(p.is_meta for p in meta.parameters())
    assert [n for n, _ in meta.named_parameters()] == [n for n, _ in real.named_parameters()]
    assert [p.dtype for p in meta.parameters()] == [p.dtype for p in real.parameters()]
    buffers = fsdp_mod.non_persistent_buffers(real)
    assert buffers and all(name.endswith("inv_freq") for name in buffers)  # the rotary embedding's
    assert not set(buffers) & set(real.state_dict())
    assert all(b.is_meta for b in fsdp_mod.non_persistent_buffers(meta).values())


def _torchrun(args: dict, log: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(port), "-m", "trainer", "train", *cli_args(args)]
    with open(log, "ab") as err:
        out = subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=err, timeout=240)
    assert out.returncode == 0, log.read_text(errors="replace")[-3000:]


@pytest.mark.slow
def test_meta_init_loads_the_checkpoint_as_the_ordinary_load_does_in_half_the_memory(
    tmp_path: Path, llama_dir: Path
) -> None:
    common = dict(precision="fp32", micro_batch=2, max_steps=2, fsdp=True)
    runs = {}
    for meta in (True, False):
        run = tmp_path / ("meta" if meta else "ordinary")
        _torchrun(_args(run, llama_dir, **common, meta_init=meta), tmp_path / "log")
        events = read_events(run)
        runs[meta] = (events[0], [e for e in events if e["kind"] == "step"], final_weights(run))
    (start, steps, weights), (start0, steps0, weights0) = runs[True], runs[False]
    assert start["meta_init"] is True and start0["meta_init"] is False
    # step 1's loss is computed by the weights just loaded: the same model, rotary embeddings included
    assert steps[0]["loss"] == pytest.approx(steps0[0]["loss"], abs=1e-6)
    assert steps[1]["loss"] == pytest.approx(steps0[1]["loss"], abs=1e-6)
    for name, w in weights0.items():
        torch.testing.assert_close(weights[name], w, rtol=0, atol=1e-6, msg=name)
    # each rank holds half the parameters (fp32, 4 bytes each), give or take the shards' padding
    full_bytes = 4 * start["params"]
    assert start["param_bytes_per_rank"] == pytest.approx(full_bytes / 2, rel=0.02)
