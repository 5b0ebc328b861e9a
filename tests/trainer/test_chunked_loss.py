"""The chunked cross-entropy over the output head: the plain path's loss and gradients within 1e-5, and
the full logits gone from a step's peak memory on a 128k-vocabulary model (torch's MemTracker, CPU)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.conftest import TINY_GPT2, final_weights, make_config, read_events
from trainer import losses
from trainer.loop import EXIT_OK, train

CPU = torch.device("cpu")
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_function_matches_plain_cross_entropy(chunk: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(chunk)
    n, d, v = 150, 24, 700
    h = torch.randn(n, d, generator=gen, requires_grad=True)
    w = (0.2 * torch.randn(v, d, generator=gen)).requires_grad_()
    b = torch.randn(v, generator=gen, requires_grad=True) if bias else None
    t = torch.randint(0, v, (n,), generator=gen)
    t[::5] = losses.IGNORE_INDEX
    inputs = [x for x in (h, w, b) if x is not None]

    ref = F.cross_entropy(F.linear(h, w, b), t, ignore_index=losses.IGNORE_INDEX, reduction="sum")
    ref_grads = torch.autograd.grad(ref * 0.3, inputs)
    out = losses.chunked_linear_cross_entropy(h, w, b, t, chunk=chunk)
    grads = torch.autograd.grad(out * 0.3, inputs)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # evaluation: the same loss, no gradients computed along the way
        torch.testing.assert_close(losses.chunked_linear_cross_entropy(h, w, b, t, chunk=chunk), ref)


def _tiny(kind: str, vocab: int = 257, **extra) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.AutoConfig.for_model(**{**TINY_GPT2, **NO_DROPOUT, "vocab_size": vocab, **extra})
    else:
        cfg = transformers.AutoConfig.for_model(
            kind,
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **extra,
        )
    return transformers.AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_training_step_matches_the_plain_path(kind: str) -> None:
    ids = torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": ids}
    results = {}
    for impl in ("plain", "chunked"):
        model = _tiny(kind)
        head, chosen = losses.install(model, impl, CPU)
        assert chosen == impl
        loss = losses.causal_loss_sum(model, batch, CPU, contextlib.nullcontext, head)
        (loss / 93).backward()
        results[impl] = loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
        with torch.no_grad():  # the head gives plain logits again outside a pending loss
            logits = model(input_ids=ids).logits
        assert logits.shape == (3, 32, 257)
    torch.testing.assert_close(results["chunked"][0], results["plain"][0], rtol=1e-5, atol=1e-5)
    for name, grad in results["plain"][1].items():
        torch.testing.assert_close(results["chunked"][1][name], grad, rtol=1e-5, atol=1e-5, msg=name)


def test_which_models_and_devices_get_which_loss() -> None:
    gpt2 = _tiny("gpt2")
    assert losses.install(gpt2, "plain", CPU) == (None, "plain")
    assert losses.install(gpt2, "auto", CPU)[1] == "chunked"  # no Liger off CUDA
    with pytest.raises(ValueError, match="CUDA only"):
        losses.install(_tiny("gpt2"), "liger", CPU)
    capped = _tiny("gemma2", head_dim=8, final_logit_softcapping=30.0)
    assert losses.install(capped, "auto", CPU) == (None, "plain")
    with pytest.raises(ValueError, match="gemma2"):
        losses.install(capped, "chunked", CPU)


def _peak_step_bytes(impl: str, vocab: int, tokens: tuple[int, int]) -> tuple[int, int]:
    """(peak bytes of one forward and backward, parameter bytes), tracked by torch's MemTracker."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model = _tiny("gpt2", vocab=vocab, n_layer=1, n_embd=64)
    head, _ = losses.install(model, impl, CPU)
    ids = torch.randint(0, vocab, tokens, generator=torch.Generator().manual_seed(1))
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        losses.causal_loss_sum(model, {"input_ids": ids}, CPU, contextlib.nullcontext, head).backward()
    peak = tracker.get_tracker_snapshot("peak")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return int(sum(v["Total"] for v in peak.values())), params


def test_peak_step_memory_falls_by_the_logits_on_a_128k_vocabulary() -> None:
    vocab, d, tokens = 128256, 64, (4, 64)
    n = tokens[0] * tokens[1]
    plain, params = _peak_step_bytes("plain", vocab, tokens)
    chunked, _ = _peak_step_bytes("chunked", vocab, tokens)
    logits = n * vocab * 4  # one fp32 tokens x vocabulary tensor: 125 MiB here
    weight = vocab * d * 4  # one gradient of the tied embedding / head matrix: 31 MiB
    # plain: the logits, their log-softmax kept for backward and its gradient live together
    assert plain == pytest.approx(params + 3 * logits, rel=0.02)
    # chunked: the peak is no longer the loss but the tied matrix's two gradients (lookup, head) and their sum
    assert chunked == pytest.approx(params + 3 * weight, rel=0.02)
    assert losses.chunk_tokens(n, d, vocab) * vocab * 4 < weight  # one chunk's logits: 16 MiB
    assert plain / chunked > 3


def test_a_run_with_the_chunked_loss_trains_like_the_plain_one(tmp_path: Path, model_config: Path) -> None:
    nodrop = tmp_path / "nodrop.json"
    nodrop.write_text(
        model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')
    )
    for impl in ("plain", "chunked"):
        cfg = make_config(tmp_path / impl, nodrop, max_steps=3, loss_impl=impl, eval_every_steps=3)
        assert train(cfg) == EXIT_OK
    starts = {impl: read_events(tmp_path / impl)[0] for impl in ("plain", "chunked")}
    assert {impl: e["loss_impl"] for impl, e in starts.items()} == {"plain": "plain", "chunked": "chunked"}
    evals = {impl: [e for e in read_events(tmp_path / impl) if e["kind"] == "eval"][0] for impl in starts}
    assert evals["chunked"]["eval_loss"] == pytest.approx(evals["plain"]["eval_loss"], rel=1e-5)
    a, b = final_weights(tmp_path / "plain"), final_weights(tmp_path / "chunked")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5)


def test_an_impossible_loss_choice_exits_2_with_the_reason(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=1, loss_impl="liger")) == 2
    end = read_events(run)[-1]
    assert end["kind"] == "run_end" and end["exit_code"] == 2 and end["error"] == "--loss-impl liger runs on CUDA only"


def test_a_gradient_scaler_scale_beyond_fp16_stays_finite() -> None:
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(64, 16, generator=gen, requires_grad=True)
    w = torch.randn(100, 16, generator=gen, requires_grad=True)
    t = torch.randint(0, 100, (64,), generator=gen)
    grads = []
    for scale in (1.0, 65536.0):  # GradScaler's first scale; fp16's largest finite value is 65504
        with torch.autocast("cpu", dtype=torch.float16):
            loss = losses.chunked_linear_cross_entropy(h, w, None, t, chunk=16)
        grads.append(torch.autograd.grad(loss * scale, (h, w)))
    for unscaled, scaled in zip(*grads, strict=True):
        assert scaled.dtype == torch.float32 and torch.isfinite(scaled).all()
        torch.testing.assert_close(scaled / 65536.0, unscaled)


def test_16_bit_chunks_add_into_one_fp32_weight_gradient_without_a_temporary() -> None:
    """Issue 28 item 5: each chunk adds its share of the head weight's gradient straight into one fp32
    buffer (no 16-bit product of the weight's size made and then added), and chunks are fewer and larger."""
    from torch.distributed._tools.mem_tracker import MemTracker

    vocab, hidden, n = 32768, 256, 64
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(n, hidden, generator=g) * 0.1).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * 0.02).requires_grad_()
    targets = torch.randint(0, vocab, (n,), generator=g)
    tracker = MemTracker()
    with tracker:
        loss = losses.chunked_linear_cross_entropy(h, w, None, targets, compute_dtype=torch.bfloat16)
        peak = sum(v["Total"] for v in tracker.get_tracker_snapshot("peak").values())
    loss.backward()
    weight_fp32 = vocab * hidden * 4
    chunk = losses.chunk_tokens(n, hidden, vocab)
    assert chunk == n  # one chunk: 4 x 64 x 256 tokens x hidden < MIN_CHUNK_ELEMS, so 128 tokens' worth
    logits = chunk * vocab * (4 + 2)  # the chunk's fp32 logits (their gradient in place) and a bf16 copy
    # forward's peak of what it allocates: the fp32 weight gradient, the bf16 weight copy, one chunk's logits,
    # the head input's bf16 copy, fp32 copy and bf16 gradient; the old 16-bit product of the weight's size
    # (vocab x hidden x 2 B, 16 MiB here) added to the fp32 buffer took the peak 26% above this
    bound = weight_fp32 + vocab * hidden * 2 + logits + n * hidden * (2 + 4 + 2)
    assert peak <= bound * 1.02, (peak, bound)
    ref_w = w.detach().bfloat16().float().requires_grad_()
    ref_h = h.detach().bfloat16().float().requires_grad_()
    torch.nn.functional.cross_entropy(ref_h @ ref_w.t(), targets, reduction="sum").backward()
    torch.testing.assert_close(w.grad, ref_w.grad, rtol=2e-2, atol=1e-4)
    # fewer, larger chunks: 8k tokens at width 4096 and a 128k vocabulary take 8 chunks (Liger's sizing: 32)
    assert -(-8192 // losses.chunk_tokens(8192, 4096, 128256)) == 8
