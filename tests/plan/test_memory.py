"""Memory estimator: exact state bytes against real optimizers, hand-computed terms, properties, fit."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner.plan import activation_ledger as ledger
from gpuplanner.plan import memory as mem
from gpuplanner.plan import memory_allocator as alloc
from gpuplanner.plan import memory_fit
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import ATTENTION, CHECKPOINTING, OPTIMIZERS, PRECISIONS, SHARDING, PlanInputError, TrainSetup

GIB = 1024**3
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "vocab_size": 300,
    "tie_word_embeddings": False,
}
TINY_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300, "n_positions": 128}


def _real(cfg: dict, dtype_name: str = "float32"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = dict(cfg)
    config = transformers.AutoConfig.for_model(c.pop("model_type"), **c)
    return torch, transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype_name))


def _state_bytes(opt) -> int:
    total = 0
    for state in opt.state.values():
        for key, value in state.items():
            if key != "step" and hasattr(value, "numel"):
                total += value.numel() * value.element_size()
    return total


@pytest.mark.parametrize(
    ("cfg", "optimizer", "precision"),
    [
        (TINY_LLAMA, "adamw", "bf16-mixed"),
        (TINY_LLAMA, "adamw", "bf16"),
        (TINY_GPT2, "adamw-fused", "fp32"),
        (TINY_LLAMA, "sgd", "fp32"),
        (TINY_GPT2, "adafactor", "fp32"),
        (TINY_LLAMA, "adafactor", "fp32"),
    ],
)
def test_gradient_and_optimizer_bytes_match_a_real_step(cfg, optimizer, precision) -> None:
    dtype = "bfloat16" if precision == "bf16" else "float32"
    torch, model = _real(cfg, dtype)
    spec = ms.from_config(cfg)
    setup = TrainSetup(precision=precision, optimizer=optimizer, micro_batch=1, seq_len=8)
    ids = torch.randint(0, spec.vocab_size, (1, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = {
        "adamw": lambda: torch.optim.AdamW(params, foreach=True),
        "adamw-fused": lambda: torch.optim.AdamW(params, fused=True),
        "sgd": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        "adafactor": lambda: torch.optim.Adafactor(params),
    }[optimizer]()
    opt.step()
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in params)
    trainable = mem.trainable_params(spec, setup)
    assert trainable == sum(p.numel() for p in params)
    # at the optimizer step the breakdown holds all gradients and states (single GPU, no DDP buckets)
    param_b = 2 if precision == "bf16" else 4
    assert grad_bytes == trainable * param_b
    state, _ = mem._optimizer_state_bytes(spec, setup, trainable, param_b)
    assert state == _state_bytes(opt)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # peft calls a deprecated transformers alias
def test_lora_gradient_and_state_bytes_match_peft() -> None:
    peft = pytest.importorskip("peft")
    torch, model = _real(TINY_LLAMA, "bfloat16")
    spec = ms.from_config(TINY_LLAMA)
    setup = TrainSetup(
        method="lora", lora_rank=4, lora_targets=("q_proj", "v_proj"), precision="bf16-mixed", micro_batch=1, seq_len=8
    )
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    ids = torch.randint(0, 300, (1, 8))
    pm(input_ids=ids, labels=ids).loss.backward()
    params = [p for p in pm.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in params)  # peft keeps adapters in fp32
    opt = torch.optim.AdamW(params, foreach=True)
    opt.step()
    trainable = mem.trainable_params(spec, setup)
    assert trainable == sum(p.numel() for p in params)
    assert sum(p.grad.numel() * 4 for p in params) == 4 * trainable
    assert _state_bytes(opt) == mem._optimizer_state_bytes(spec, setup, trainable, 4)[0]
    frozen = sum(p.numel() * p.element_size() for p in pm.parameters() if not p.requires_grad)
    est = mem.estimate_memory(spec, setup)
    assert est.weights == frozen + 4 * trainable


# ---------------------------------------------------------------------------- hand-computed terms


def _spec():
    return ms.from_config(TINY_LLAMA)


def test_full_adamw_amp_persistent_state_by_hand() -> None:
    spec = ms.from_preset("llama-3.1-8b")
    n = spec.n_params
    b = mem.estimate_memory(spec, TrainSetup(precision="bf16-mixed", optimizer="adamw", seq_len=512))
    # fp32 weights 4N, fp32 grads 4N, two fp32 states 8N, foreach transient 4N at the step
    assert b.peak_moment == "optimizer-step"
    assert (b.weights, b.gradients, b.optimizer) == (4 * n, 4 * n, 8 * n)
    # the step's transient bytes are the foreach buffer (4N): the allocator's slack is its fitted share
    assert b.overhead == mem.CUDA_CONTEXT_BYTES + alloc.slack_bytes(4 * n) + 4 * n
    fused = mem.estimate_memory(spec, TrainSetup(precision="bf16-mixed", optimizer="adamw-fused", seq_len=512))
    assert b.total - fused.total >= 4 * n


def test_pure_bf16_and_optimizers_by_hand() -> None:
    spec = _spec()
    n = spec.n_params
    s = TrainSetup(precision="bf16", optimizer="sgd", micro_batch=1, seq_len=1)
    assert mem._optimizer_state_bytes(spec, s, n, 2) == (2 * n, 0)
    s8 = replace(s, optimizer="adamw-8bit")
    small = spec.small_tensor_params
    assert mem._optimizer_state_bytes(spec, s8, n, 2)[0] == int(mem.ADAM8_BYTES_PER_PARAM * (n - small)) + 8 * small


def test_logits_term_by_hand() -> None:
    spec = ms.from_preset("llama-3.2-1b")
    s = TrainSetup(precision="bf16", micro_batch=2, seq_len=1024, optimizer="adamw-fused")
    b = mem.estimate_memory(spec, s)
    assert b.peak_moment == "start-of-backward"
    assert b.logits == 12 * 2 * 1024 * 128256


def test_activation_ledger_llama_half_by_hand() -> None:
    spec = _spec()
    h, q, kv, inter, nh = 64, 64, 32, 160, 4
    per_layer, outside = ledger.layer_bytes(spec, "half", None)
    norm = 4 * h + 4 + 2 * h + 2 * h  # fp32 upcast, rsqrt, normalised copy, output
    attn = 2 * q + 2 * kv + 2 * kv + 2 * q + 4 * nh + 2 * q
    mlp = 4 * 2 * inter
    assert per_layer == 2 * norm + attn + mlp
    assert outside == 2 * h + 8 + 2 * h


def test_checkpointing_keeps_layer_inputs_plus_one_layer() -> None:
    spec = _spec()
    s = TrainSetup(precision="bf16", micro_batch=4, seq_len=64, optimizer="adamw-fused")
    per_layer, outside = ledger.layer_bytes(spec, "half", None)
    tokens = 4 * 64
    full = mem.estimate_memory(spec, replace(s, grad_checkpointing="full"))
    none = mem.estimate_memory(spec, s)
    assert none.activations == 2 * per_layer * tokens + outside * tokens
    if full.peak_moment == "start-of-backward":
        stored = 2 * 2 * 64 * tokens + outside * tokens
        # one block re-run at a time, with the gradient buffers of its backward (three MLP-wide tensors)
        grad_work = 3 * spec.intermediate_size * 2 * tokens
        assert full.activations + full.logits == stored + max(full.logits, per_layer * tokens + grad_work)


def test_eager_attention_adds_the_score_matrices() -> None:
    spec = _spec()
    s = TrainSetup(precision="bf16", micro_batch=2, seq_len=128, optimizer="adamw-fused")
    eager = mem.estimate_memory(spec, replace(s, attention="eager"))
    sdpa = mem.estimate_memory(spec, s)
    saved = 2 * (4 + 2) * 2 * 4 * 128 * 128  # layers x (fp32 softmax + bf16 copy) x b x heads x s^2
    # softmax's backward: the incoming bf16 gradient and its fp32 upcast (softmax_backward's bf16 result is
    # made once the 16-bit copy of the probabilities is freed; a traced step agrees: test_trace.py), one block
    # at a time, after its MLP's gradient buffers are gone; the larger of those and the loss region counts
    transient = (2 + 4) * 2 * 4 * 128 * 128
    tokens = 2 * 128
    grad_work = ledger.block_grad_bytes(spec, "half") * tokens
    logits = 12 * tokens * spec.vocab_size
    assert transient > grad_work
    assert eager.start_of_backward - sdpa.start_of_backward == saved + max(logits, transient) - max(logits, grad_work)


def test_qlora_weights_by_hand() -> None:
    spec = ms.from_preset("llama-3.1-8b")
    s = TrainSetup(method="qlora", precision="bf16-mixed")
    b = mem.estimate_memory(spec, s)
    q = spec.quantizable_params
    t = mem.trainable_params(spec, s)
    assert b.weights == int(mem.NF4_BYTES_PER_PARAM * q) + 4 * (spec.n_params - q) + 4 * t
    assert 6.0 * GIB < b.weights < 8.0 * GIB  # 4-bit blocks, but fp32 embeddings and head (2 x 525M)


def test_fsdp_shards_and_gathers() -> None:
    spec = ms.from_preset("llama-3.1-70b")
    s = TrainSetup(gpus=8, sharding="fsdp", precision="bf16-mixed", optimizer="adamw-fused", grad_checkpointing="full")
    b = mem.estimate_memory(spec, s)
    n = spec.n_params
    gathered = 2 * (spec.root_params + 2 * spec.layer_params)
    assert b.weights == -(-4 * n // 8) + gathered
    ddp = mem.estimate_memory(spec, replace(s, sharding="ddp"))
    assert ddp.total > 4 * b.total


def test_as_gib_keys() -> None:
    b = mem.estimate_memory(_spec(), TrainSetup())
    d = b.as_gib()
    assert list(d) == [
        "weights_gib",
        "gradients_gib",
        "optimizer_gib",
        "activations_gib",
        "logits_gib",
        "overhead_gib",
        "total_gib",
        "allocated_gib",
        "reserved_gib",
        "variable_length_slack_gib",
        "cuda_context_gib",
        "allocator_slack_gib",
        "stream_pools_gib",
        "start_of_backward_gib",
        "end_of_backward_gib",
        "optimizer_step_gib",
    ]
    assert b.source == "formula"


# ---------------------------------------------------------------------------- properties

SPECS = [ms.from_preset(n) for n in ("gpt2", "bert-base-uncased", "llama-3.2-1b", "qwen2.5-7b", "gemma-2-9b")] + [
    ms.from_param_count(3_000_000_000),
    _spec(),
]

setups = st.builds(
    TrainSetup,
    method=st.sampled_from(("full", "lora", "qlora")),
    lora_rank=st.integers(1, 256),
    lora_targets=st.sampled_from((("q_proj", "k_proj", "v_proj", "o_proj"), ("attention",), ("all-linear",))),
    precision=st.sampled_from(PRECISIONS[1:]),
    optimizer=st.sampled_from(OPTIMIZERS),
    micro_batch=st.integers(1, 64),
    grad_accum=st.integers(1, 16),
    seq_len=st.integers(1, 32768),
    grad_checkpointing=st.sampled_from(CHECKPOINTING),
    attention=st.sampled_from(ATTENTION),
    gpus=st.integers(1, 64),
    sharding=st.sampled_from(SHARDING),
)
PROP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(spec=st.sampled_from(SPECS), s=setups)
def test_never_raises_nan_or_negative(spec, s) -> None:
    b = mem.estimate_memory(spec, s)
    for v in (b.weights, b.gradients, b.optimizer, b.activations, b.logits, b.overhead):
        assert isinstance(v, int) and v >= 0
    assert all(math.isfinite(x) and x >= 0 for x in b.as_gib().values())
    assert b.peak_moment in ("start-of-backward", "end-of-backward", "optimizer-step")


@PROP
@given(spec=st.sampled_from(SPECS), s=setups)
def test_checkpointing_never_raises_activations(spec, s) -> None:
    def act(mode):
        b = mem.estimate_memory(spec, replace(s, grad_checkpointing=mode))
        return b.total

    # while a checkpointed block is recomputed its kept input is alive beside the recomputed tensors: with
    # two layers (one stored, one checkpointed) that input, with its allocator slack, is all it can add
    res_b = 4  # the residual stream's bytes per element at most (fp32 under autocast and QLoRA)
    one_input = (1 + alloc.FRAGMENTATION_FIXED) * res_b * spec.hidden_size * s.micro_batch * s.seq_len + 1
    assert act("full") <= act("every-other") <= act("none") + (one_input if spec.num_layers <= 2 else 0)


@PROP
@given(spec=st.sampled_from(SPECS), s=setups, extra=st.integers(1, 32))
def test_more_gpus_under_fsdp_never_raise_memory(spec, s, extra) -> None:
    a = mem.estimate_memory(spec, replace(s, sharding="fsdp", gpus=max(2, s.gpus)))
    b = mem.estimate_memory(spec, replace(s, sharding="fsdp", gpus=max(2, s.gpus) + extra))
    assert b.total <= a.total


@PROP
@given(spec=st.sampled_from(SPECS), s=setups, extra=st.integers(1, 64))
def test_larger_micro_batch_never_lowers_memory(spec, s, extra) -> None:
    a = mem.estimate_memory(spec, s)
    b = mem.estimate_memory(spec, replace(s, micro_batch=s.micro_batch + extra))
    assert b.total >= a.total


# ---------------------------------------------------------------------------- fit and suggestions


def test_fits_and_max_micro_batch() -> None:
    spec = ms.from_preset("llama-3.2-1b")
    s = TrainSetup(precision="bf16-mixed", seq_len=2048, grad_checkpointing="full")
    mb = memory_fit.max_micro_batch(spec, s, 79.6)
    assert mb >= 1
    assert mem.fits(mem.estimate_memory(spec, replace(s, micro_batch=mb)), 79.6)
    if mb < memory_fit.MAX_MICRO_BATCH:
        assert not mem.fits(mem.estimate_memory(spec, replace(s, micro_batch=mb + 1)), 79.6)
    assert memory_fit.max_micro_batch(ms.from_preset("llama-3.1-70b"), TrainSetup(), 22.0) == 0


@pytest.mark.parametrize(
    ("model", "setup", "cap"),
    [
        ("llama-3.1-8b", TrainSetup(precision="bf16-mixed", micro_batch=8, grad_accum=2, seq_len=2048), 79.6),
        ("llama-3.1-8b", TrainSetup(method="lora", micro_batch=16, seq_len=4096), 22.0),
        ("gpt2-xl", TrainSetup(precision="fp32", micro_batch=16, seq_len=1024), 22.0),
        ("qwen2.5-32b", TrainSetup(), 79.6),
    ],
)
def test_every_suggestion_fits(model, setup, cap) -> None:
    spec = ms.from_preset(model)
    assert not mem.fits(mem.estimate_memory(spec, setup), cap)
    out = memory_fit.fit_suggestions(spec, setup, cap, larger_gpus=[("H200", 139.8), ("B200", 178.0)])
    assert out, "at least one change should make it fit"
    # each suggestion is re-estimated inside; check the micro-batch/accumulation one keeps the batch
    for text in out:
        if text.startswith("micro-batch"):
            k, m = int(text.split()[1]), int(text.split()[3])
            assert k * m == setup.micro_batch * setup.grad_accum
            assert mem.fits(mem.estimate_memory(spec, replace(setup, micro_batch=k, grad_accum=m)), cap)
    assert (
        memory_fit.fit_suggestions(
            spec,
            replace(
                setup, method="qlora", micro_batch=1, seq_len=256, grad_checkpointing="full", precision="bf16-mixed"
            ),
            200.0,
        )
        == []
    )


# ---------------------------------------------------------------------------- issue 12 memory fixes


def _saved_bytes_per_token(torch, model, ids) -> float:
    """Bytes of the distinct storages autograd saves for the backward of one forward, per token."""
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).logits.float().mean()
    return sum(seen.values()) / ids.numel()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # peft calls a deprecated transformers alias
def test_lora_saves_an_fp32_copy_of_each_wrapped_modules_input_as_peft_does() -> None:
    """peft casts a 16-bit input to the fp32 adapters before lora_A, which saves that copy: measured
    on a real peft model, one more wrapped module costs its input features x 4 bytes (+ r x 4)."""
    peft = pytest.importorskip("peft")
    torch, _ = _real(TINY_LLAMA)
    cfg = dict(TINY_LLAMA, hidden_size=128, intermediate_size=384, num_attention_heads=4, num_key_value_heads=4)
    ids = torch.randint(0, 300, (2, 64))
    measured = {}
    estimated = {}
    spec = ms.from_config(cfg)
    for targets in (("q_proj",), ("q_proj", "down_proj")):
        torch.manual_seed(0)
        _, model = _real(cfg, "bfloat16")
        pm = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=list(targets), lora_dropout=0.0))
        measured[targets] = _saved_bytes_per_token(torch, pm, ids)
        setup = TrainSetup(
            method="lora", lora_rank=8, lora_targets=targets, precision="bf16", micro_batch=2, seq_len=64
        )
        estimated[targets] = mem.estimate_memory(spec, setup).activations / ids.numel()
    layers = cfg["num_hidden_layers"]
    expected = layers * (384 * 4 + 8 * 4)  # down_proj: fp32 copy of its 384-wide input + lora_A output
    extra_measured = measured[("q_proj", "down_proj")] - measured[("q_proj",)]
    extra_estimated = estimated[("q_proj", "down_proj")] - estimated[("q_proj",)]
    assert extra_estimated == pytest.approx(expected)
    assert extra_measured == pytest.approx(expected, rel=0.1)  # + a few small bookkeeping tensors


def test_a_sequence_classifier_has_no_vocabulary_sized_logits() -> None:
    cfg = {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 30522,
        "max_position_embeddings": 128,
        "num_labels": 3,
    }
    spec = ms.from_config(cfg)
    setup = TrainSetup(precision="fp32", micro_batch=8, seq_len=128)
    breakdown = mem.estimate_memory(spec, setup)
    assert breakdown.logits <= mem.LOGITS_BYTES_PER_ELEM * 8 * 3
    masked = ms.from_config(dict(cfg, architectures=["BertForMaskedLM"]))
    assert mem.estimate_memory(masked, setup).logits >= 8 * 128 * 30522 * 4


def test_eager_gpt2_attention_under_autocast_keeps_the_fp32_softmax_and_a_16_bit_copy() -> None:
    spec = ms.from_config(dict(TINY_GPT2, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0))
    s = TrainSetup(precision="bf16-mixed", micro_batch=2, seq_len=64, optimizer="adamw-fused")
    eager = mem.estimate_memory(spec, replace(s, attention="eager")).activations
    sdpa = mem.estimate_memory(spec, s).activations
    # layers x (fp32 softmax output + 16-bit copy for probs @ V) x batch x heads x s^2
    assert eager - sdpa == 2 * (4 + 2) * 2 * 4 * 64 * 64
    with_dropout = ms.from_config(dict(TINY_GPT2, attn_pdrop=0.1, resid_pdrop=0.0, embd_pdrop=0.0))
    eager_d = mem.estimate_memory(with_dropout, replace(s, attention="eager")).activations
    sdpa_d = mem.estimate_memory(with_dropout, s).activations
    assert eager_d - sdpa_d == 2 * (4 + 2 + 1) * 2 * 4 * 64 * 64  # + the dropout mask


# --- what a reported peak counts, the loss's logits, bitsandbytes' saved inputs ---------------------


def test_measured_peaks_by_hand() -> None:
    """allocated/active leave out the CUDA context and the allocator's slack, reserved adds the slack
    back, nvidia-smi is everything the GPU must hold."""
    spec = ms.from_preset("llama-3.1-8b")
    b = mem.estimate_memory(spec, TrainSetup(precision="bf16-mixed", optimizer="adamw", seq_len=512))
    n = spec.n_params
    peak = 20 * n  # optimizer step: fp32 weights, grads, two states and the foreach buffer
    assert b.cuda_context == mem.CUDA_CONTEXT_BYTES
    assert b.transient == 4 * n  # all but the persistent 16N is the step's foreach buffer
    assert b.allocator_slack == alloc.slack_bytes(4 * n) == int(alloc.FRAGMENTATION_FIXED * 4 * n)
    assert b.measured("allocated") == b.measured("active") == b.allocated == peak
    assert b.measured("reserved") == b.reserved == peak + b.allocator_slack
    assert b.measured("nvidia-smi") == b.total == peak + b.allocator_slack + mem.CUDA_CONTEXT_BYTES
    assert b.as_gib()["cuda_context_gib"] == pytest.approx(mem.CUDA_CONTEXT_BYTES / GIB, abs=1e-3)
    with pytest.raises(mem.PlanInputError) as err:
        b.measured("smi")
    assert err.value.field == "measure"


@pytest.mark.parametrize(
    ("engine", "method", "per_elem", "softcap_extra"),
    [("bundled", "lora", 12, 4), ("litgpt", "full", 6, 2), ("litgpt", "lora", 4, 2), ("unsloth", "lora", 4, 2)],
)
def test_engine_losses_charge_the_logits_by_hand(engine: str, method: str, per_elem: int, softcap_extra: int) -> None:
    """fp32 (the bundled trainer): 16-bit logits upcast (log-softmax, nll grad and its backward in fp32);
    half (LitGPT's full fine-tune): logits, the shifted copy and the log-softmax in 16 bit; chunked-half
    (LitGPT's LoRA, Unsloth's fused loss): logits kept plus each chunk's log-softmax."""
    setup = TrainSetup(method=method, precision="bf16", micro_batch=8, seq_len=512, engine=engine)
    tokens = 8 * 512
    spec = _spec()
    b = mem.estimate_memory(spec, setup)
    assert b.peak_moment == "start-of-backward"
    assert b.logits == per_elem * tokens * spec.vocab_size
    capped = ms.from_config({**TINY_LLAMA, "model_type": "gemma2", "head_dim": 16, "final_logit_softcapping": 30.0})
    c = mem.estimate_memory(capped, setup)
    assert c.logits == (per_elem + softcap_extra) * tokens * capped.vocab_size


def test_sequence_classifier_has_no_vocabulary_logits() -> None:
    cfg = {**TINY_LLAMA, "architectures": ["LlamaForSequenceClassification"], "num_labels": 3}
    spec = ms.from_config(cfg)
    setup = TrainSetup(precision="bf16", micro_batch=4, seq_len=64)
    b = mem.estimate_memory(spec, setup)
    lm = mem.estimate_memory(_spec(), setup)
    labels = next(m.out_features for m in spec.linears if m.is_output)
    assert mem._score_elems(spec, 4, 4 * 64) == 4 * labels
    assert mem._score_elems(_spec(), 4, 4 * 64) == 4 * 64 * 300
    assert b.total < lm.total


def test_qlora_keeps_every_quantized_linears_input() -> None:
    """bitsandbytes' MatMul4Bit saves its 16-bit input for the backward although the 4-bit weight is
    frozen: under QLoRA's autocast each block linear casts (and keeps) its own copy of its input."""
    spec = _spec()
    h, q, inter = spec.hidden_size, spec.num_heads * spec.head_dim, spec.intermediate_size
    block = frozenset(m.path for m in spec.linears if m.in_block)
    with_inputs, _ = ledger.layer_bytes(spec, "amp", block)
    without, _ = ledger.layer_bytes(spec, "amp", frozenset())
    # q, k and v each cast the norm output, o_proj keeps q, gate and up each cast the second norm's
    # output, down_proj keeps the gated product: all 16 bit
    assert with_inputs - without == 2 * (3 * h + q + 2 * h + inter)
    setup = TrainSetup(method="qlora", precision="bf16-mixed", micro_batch=2, seq_len=64)
    b = mem.estimate_memory(spec, setup)
    tokens = 2 * 64
    adapters = sum(
        (4 * setup.lora_rank + 4 * m.in_features) * m.count
        for m in ms.resolve_targets(spec, setup.lora_targets)
        if m.in_block
    )
    outside = ledger.layer_bytes(spec, "amp", frozenset())[1]
    expected = spec.num_layers * with_inputs * tokens + adapters * tokens + outside * tokens
    assert b.activations == pytest.approx(expected, abs=spec.num_layers)


# ---------------------------------------------------------------------------- how other training code runs


def test_alternate_matmul_selective_keeps_every_other_matmul_by_hand() -> None:
    """torchtitan's "op" policy: the 1st, 3rd, 5th and 7th matmul of a Llama block (q, v, gate, down)."""
    spec = ms.from_preset("llama-3.1-8b")
    every = ledger.selective_layer_bytes(spec, "half", "sdpa")
    alternate = ledger.selective_layer_bytes(spec, "half", "sdpa", ledger.SELECTIVE_ALTERNATE_MATMUL)
    attn = 2 * 4096 + 4 * 32  # SDPA output and fp32 log-sum-exp per head
    assert every == 2 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096) + attn
    assert alternate == 2 * (4096 + 1024 + 14336 + 4096) + attn
    s = TrainSetup(
        precision="bf16", micro_batch=8, seq_len=8192, grad_checkpointing="selective", gpus=8, sharding="fsdp"
    )
    a = mem.estimate_memory(spec, replace(s, engine="torchtitan"))  # torchtitan's selective "op" policy
    b = mem.estimate_memory(spec, s)
    assert a.peak_moment == b.peak_moment == "start-of-backward"
    assert b.activations - a.activations == 32 * 2 * (1024 + 4096 + 14336) * 8 * 8192
    with pytest.raises(PlanInputError, match="engine"):
        replace(s, engine="megatron")


def test_param_cast_mixed_precision_keeps_16_bit_activations() -> None:
    """FSDP2's MixedPrecisionPolicy casts the weights, not the activations: no fp32 residual stream."""
    spec = _spec()
    s = TrainSetup(precision="bf16-mixed", micro_batch=2, seq_len=64, gpus=2, sharding="fsdp")
    cast = mem.estimate_memory(spec, s)  # the bundled trainer's FSDP2 policy
    auto = mem.estimate_memory(spec, replace(s, engine="unsloth"))  # autocast over fp32 weights
    half = mem.estimate_memory(spec, replace(s, precision="bf16"))
    assert cast.activations == half.activations < auto.activations
    assert cast.weights == auto.weights  # the fp32 master weights are still what is sharded


def test_fsdp_no_sync_keeps_full_gradients_between_micro_steps() -> None:
    spec = ms.from_preset("llama-3.2-1b")
    s = TrainSetup(
        precision="bf16", micro_batch=1, seq_len=512, gpus=4, sharding="fsdp", grad_accum=4, grad_checkpointing="full"
    )
    each = mem.estimate_memory(spec, s)  # the bundled trainer reduce-scatters every micro-step
    no_sync = mem.estimate_memory(spec, replace(s, engine="hf-trainer"))  # FSDP1 under accelerate's no_sync
    n = spec.n_params
    assert no_sync.peak_moment != "optimizer-step"
    # the whole bf16 gradient: the previous step's shards were freed by zero_grad(set_to_none)
    # (FSDP1's flat parameters add the root unit's per-parameter gradients and their flat copy as the
    # backward ends: tests/plan/test_memory_engines.py)
    root = 2 * 2 * spec.root_params if no_sync.peak_moment == "end-of-backward" else 0
    assert no_sync.gradients == 2 * n + root
    assert no_sync.total - each.total > 1.25 * n  # the whole bf16 gradient, not a quarter of it
    # without accumulation there is nothing to keep: only FSDP1's root unit gradients differ, at the end
    one = replace(s, grad_accum=1)
    fsdp1, fsdp2 = mem.estimate_memory(spec, replace(one, engine="hf-trainer")), mem.estimate_memory(spec, one)
    assert fsdp1.start_of_backward == fsdp2.start_of_backward
    assert fsdp1.end_of_backward - fsdp2.end_of_backward == 2 * 2 * spec.root_params


def test_attention_soft_capping_keeps_tanh_output_under_eager_attention() -> None:
    """Gemma 2: tanh's 16-bit output per score element besides the fp32 softmax and its 16-bit copy."""
    plain = ms.from_config(TINY_LLAMA)
    capped = ms.from_config({**TINY_LLAMA, "attn_logit_softcapping": 50.0})
    assert capped.attn_softcap and not plain.attn_softcap
    s = TrainSetup(precision="bf16", micro_batch=2, seq_len=128, optimizer="adamw-fused", attention="eager")
    diff = mem.estimate_memory(capped, s).activations - mem.estimate_memory(plain, s).activations
    assert diff == 2 * 2 * 2 * 4 * 128 * 128  # layers x bf16 tanh output x b x heads x s^2
    # SDPA/flash keeps no score matrix, capped or not
    sdpa = replace(s, attention="sdpa")
    assert mem.estimate_memory(capped, sdpa).activations == mem.estimate_memory(plain, sdpa).activations
    with pytest.raises(PlanInputError, match="attn_logit_softcapping"):
        ms.from_config({**TINY_LLAMA, "attn_logit_softcapping": "high"})


def test_fsdp_plans_follow_what_the_bundled_trainer_runs() -> None:
    """--fsdp in the trainer: FSDP2 MixedPrecisionPolicy (16-bit gathered weights, no fp32 residual
    stream) and gradients reduce-scattered every micro-step (only shards persist): plans count both."""
    from gpuplanner.plan.catalog import load_catalog
    from gpuplanner.plan.planner import PlanRequest, make_plan
    from gpuplanner.plan.runtime import Workload

    spec = ms.from_preset("llama-3.2-1b")
    s = TrainSetup(precision="bf16-mixed", micro_batch=2, seq_len=1024, gpus=4, sharding="fsdp", grad_accum=4)
    plan = make_plan(PlanRequest(spec, s, Workload(samples=1000), gpu="A100 80GB"), load_catalog(), suggest=False)
    assert plan.memory == mem.estimate_memory(spec, s)
    n = spec.n_params
    # the fp32 gradient shard and one block's full gradient while it is reduce-scattered, never the whole
    assert plan.memory.gradients <= -(-4 * n // 4) + 4 * spec.layer_params
    autocast = mem.estimate_memory(spec, replace(s, engine="unsloth"))
    assert plan.memory.activations < autocast.activations  # 16-bit residual stream under the policy
    no_sync = mem.estimate_memory(spec, replace(s, engine="hf-trainer"))
    assert no_sync.total > plan.memory.total + 2.5 * n  # FSDP1 no_sync: the whole fp32 gradient, not its shard


def test_large_fsdp_fine_tune_fits_when_gradients_are_reduced_each_micro_step() -> None:
    """Llama-3.1-70B full fine-tune on 64 x H100, FSDP, micro-batch 1, accumulation 4, sequence 8192 (issue
    24): per-GPU gradients at most twice the fp32 shard, and the plan fits in 80 GB."""
    spec = ms.from_preset("llama-3.1-70b")
    s = TrainSetup(
        precision="bf16-mixed",
        micro_batch=1,
        grad_accum=4,
        seq_len=8192,
        gpus=64,
        sharding="fsdp",
        grad_checkpointing="full",
    )
    for engine in ("bundled", "torchtitan", "deepspeed", "llm-foundry", "torchtune"):
        b = mem.estimate_memory(spec, replace(s, engine=engine))
        assert b.gradients <= 2 * (4 * spec.n_params / 64), engine
        assert mem.fits(b, 80.0), (engine, b.total / mem.GIB)
    assert not mem.fits(mem.estimate_memory(spec, replace(s, engine="hf-trainer")), 80.0)


def test_fsdp_qlora_gathers_packed_4_bit_storage() -> None:
    """FSDP-QLoRA under peft/accelerate gathers the packed NF4 bytes of each block, not a 16-bit layer."""
    spec = ms.from_preset("llama-3.1-8b")
    s = TrainSetup(method="qlora", precision="bf16-mixed", micro_batch=1, seq_len=2048, gpus=2, sharding="fsdp")
    packed = mem.estimate_memory(spec, replace(s, engine="hf-trainer"))
    half = mem.estimate_memory(spec, replace(s, engine="deepspeed"))
    quant_layer = spec.quantizable_params // spec.num_layers
    expected = 2 * (mem.HALF - mem.NF4_BYTES_PER_PARAM) * quant_layer
    assert half.weights - packed.weights == pytest.approx(expected, abs=4)


def test_fsdp_mixed_precision_gathers_lora_adapters_in_16_bit() -> None:
    """Under the trainer's FSDP2 policy the fp32 adapters are gathered in bf16: lora_A's output is
    16 bit and peft makes no fp32 copy of each wrapped module's input."""
    spec = ms.from_preset("llama-3.2-1b")
    s = TrainSetup(method="lora", precision="bf16-mixed", micro_batch=2, seq_len=1024, gpus=4, sharding="fsdp")
    mods = ms.resolve_targets(spec, tuple(s.lora_targets))
    per_token = sum((mem.FP32 * m.in_features + (mem.FP32 - mem.HALF) * s.lora_rank) * m.count for m in mods)
    cast = mem.estimate_memory(spec, s)
    auto = mem.estimate_memory(spec, replace(s, engine="unsloth"))  # autocast: fp32 adapters
    tokens = s.micro_batch * s.seq_len
    saved_blocks = spec.num_layers  # no checkpointing: every block's saved tensors count
    assert auto.activations - cast.activations == per_token * tokens // spec.num_layers * saved_blocks
    # DDP keeps the fp32 adapters, and with them peft's copies
    ddp = replace(s, sharding="ddp")
    assert mem.estimate_memory(spec, ddp).activations == auto.activations


def test_fsdp_stream_pools_are_reserved_not_allocated() -> None:
    """FSDP2 keeps gradient shards and the root unit's gather buffer in its collectives' stream pools:
    reserved (and nvidia-smi) count them at the compute stream's peak, max_memory_allocated does not,
    and the gradient-shard pool shrinks with more GPUs while the gather buffer does not."""
    spec = _spec()

    def run(gpus: int) -> mem.MemoryBreakdown:
        setup = TrainSetup(method="full", precision="bf16-mixed", sharding="fsdp", gpus=gpus, seq_len=512)
        return mem.estimate_memory(spec, setup)  # the bundled trainer: param-cast, reduce each micro-step

    small, large = run(8), run(128)
    for b in (small, large):
        assert b.stream_pools > 0
        assert b.measured("reserved") - b.measured("allocated") == b.allocator_slack + b.stream_pools
        assert b.measured("nvidia-smi") == b.total
        assert max(b.start_of_backward, b.end_of_backward, b.optimizer_step) == b.measured("allocated")
        assert b.as_gib()["stream_pools_gib"] == round(b.stream_pools / mem.GIB, 3)
    # the gradient shards (4 B per parameter under reduce_dtype fp32) move the pool with the GPU count
    expected = 4 * spec.n_params * (1 / 8 - 1 / 128)
    assert small.stream_pools - large.stream_pools == pytest.approx(expected, rel=0.02)
    single = mem.estimate_memory(spec, TrainSetup(method="full", precision="bf16-mixed", seq_len=512))
    assert single.stream_pools == 0


def test_a_blocks_backward_holds_its_gradient_buffers() -> None:
    """Once the loss region is gone, the backward of a checkpointed block holds its re-run tensors and
    its gradient buffers together: at a gated MLP's product the incoming gradient and both factors'."""
    spec = ms.from_config(
        {
            "model_type": "llama",
            "hidden_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 4096,
            "vocab_size": 64,
        },
        "wide-mlp",
    )
    s = TrainSetup(precision="bf16", micro_batch=2, seq_len=256, optimizer="adamw-fused", grad_checkpointing="full")
    b = mem.estimate_memory(spec, s)
    tokens = 2 * 256
    per_layer, outside = ledger.layer_bytes(spec, "half", None)
    grad_work = 3 * 4096 * 2 * tokens
    n = spec.n_params
    stored = 2 * 2 * 256 * tokens + outside * tokens  # each block's 16-bit input
    # start of the backward, after the (tiny) loss region: bf16 weights and two AdamW states, the block
    # inputs, and the last block's re-run tensors with its gradient buffers
    assert b.start_of_backward == 6 * n + stored + per_layer * tokens + grad_work
    # end of the backward: all the gradients too, and only the first block's tensors (its gradient
    # buffers were made and freed in its MLP's backward, before its attention's weight gradients)
    assert b.end_of_backward == 8 * n + per_layer * tokens + outside * tokens
    assert b.measured("allocated") == max(b.start_of_backward, b.end_of_backward, b.optimizer_step)
