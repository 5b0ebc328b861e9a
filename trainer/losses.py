"""Next-token cross-entropy without the full logits: chunked over tokens, fused with the output head.

The plain path computes ``logits = hidden @ W.T`` for every token (tokens x vocabulary, in the compute
dtype), upcasts them to fp32 for the loss, and keeps the softmax for backward and then the logits'
gradient: about 10-12 bytes x tokens x vocabulary (10 GB per 8k tokens for a 128k vocabulary).

:func:`chunked_linear_cross_entropy` takes the head's input instead and walks the tokens in chunks:
per chunk it computes the chunk's logits (fp32 for the softmax), its summed loss, and at once the
gradients of the head's input and weight (softmax minus one-hot), then drops the chunk. Only a chunk's
logits ever exist, and backward only scales the gradients computed in forward by the incoming
gradient, so the matmul count is the plain path's (one forward, two backward). The head keeps its
parameters and state-dict names: the model's own forward calls it (DDP, FSDP, peft and
``torch.compile`` see the model they wrap), and it returns the loss in place of the logits while a
loss is pending (:class:`HeadLoss`), plain logits otherwise (evaluation with logits, generation).

On CUDA with ``liger-kernel`` installed, Liger's fused linear cross-entropy (Triton) does the same job.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from . import packing
from .model import output_head

IGNORE_INDEX = -100  # cross-entropy target that contributes nothing
LOSS_IMPLS = ("auto", "chunked", "liger", "plain")

# Model types whose causal-LM forward applies the output head to the final hidden states and nothing
# after it (no logit soft-capping or scaling), so the head may return the loss in place of the logits.
HEAD_ONLY_MODEL_TYPES = frozenset(
    {
        "gpt2",
        "gpt_neox",
        "gptj",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "phi3",
        "olmo",
        "olmo2",
        "starcoder2",
        "smollm3",
    }
)
# Config settings that change the logits after the head: a model that sets any of them takes the plain path.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
# How many tokens a chunk takes. Every chunk adds its share into the head weight's fp32 gradient, one pass
# over a vocabulary x hidden buffer, so the number of chunks sets that traffic, while a chunk's logits
# (fp32 plus a 16-bit copy, 6 B an element) set the loss's memory. A chunk's logits hold the most of:
# - CHUNK_INPUT_MULTIPLE x the head's input (tokens x hidden): Liger sizes chunks like the head's input,
#   about vocabulary / hidden chunks (32 for Llama 3 8B); four times larger makes a quarter of the passes,
#   for about 4 x 6 B x tokens x hidden of logits (800 MB for 8k tokens at width 4096, against
#   12 B x tokens x vocabulary = 12.6 GB on the plain path);
# - the head weight's size / CHUNK_INPUT_MULTIPLE: at least hidden / 4 tokens, so a small micro-batch or a
#   narrow model does not make a pass over the weight for every few tokens (a pass then costs at most 4x
#   the chunk's own logits; the chunk's memory stays under 0.4x the fp32 weight gradient every path holds);
# - MIN_CHUNK_ELEMS (16 MiB in fp32).
MIN_CHUNK_ELEMS = 1 << 22
CHUNK_INPUT_MULTIPLE = 4


def chunk_tokens(n_tokens: int, hidden: int, vocab: int) -> int:
    """Tokens per chunk (see the sizes above), at most ``n_tokens``."""
    target = max(CHUNK_INPUT_MULTIPLE * n_tokens * hidden, vocab * hidden // CHUNK_INPUT_MULTIPLE, MIN_CHUNK_ELEMS)
    return max(1, min(n_tokens, target // max(1, vocab)))


_MIXED_ADDMM: dict[str, bool] = {}


def _mixed_addmm_works(device: torch.device) -> bool:
    """Whether ``torch.addmm(fp32, 16-bit, 16-bit, out_dtype=fp32, out=fp32)`` accumulates 16-bit products
    into an fp32 buffer in place on this device (CUDA, recent torch), checked once on tiny tensors."""
    key = str(device)
    if key not in _MIXED_ADDMM:
        ok = False
        if device.type == "cuda":
            try:
                a = torch.ones(8, 4, device=device, dtype=torch.bfloat16)
                acc = torch.full((4, 4), 0.5, device=device)
                torch.addmm(acc, a.t(), a, out_dtype=torch.float32, out=acc)
                ok = acc.dtype == torch.float32 and bool(torch.all(acc == 8.5))
            except (RuntimeError, TypeError):
                ok = False
        _MIXED_ADDMM[key] = ok
    return _MIXED_ADDMM[key]


def add_weight_grad(grad_w: torch.Tensor, g: torch.Tensor, g16: torch.Tensor, h: torch.Tensor) -> None:
    """``grad_w += g.T @ h`` into the one fp32 buffer, with no weight-sized temporary. ``g``: the chunk's
    logit gradient in fp32; ``g16``: the same in the compute dtype; ``h``: the chunk's head input in the
    compute dtype. fp32 compute, or 16-bit on the CPU (where fp32 matmuls are the fast ones): an fp32
    ``addmm_``. 16-bit on CUDA: a 16-bit matmul accumulated in fp32 straight into the buffer (``addmm``
    with ``out_dtype``), or where this torch lacks it, the 16-bit product added in fp32."""
    if g16.dtype == torch.float32 or grad_w.device.type != "cuda":
        grad_w.addmm_(g.t(), h.float())
    elif _mixed_addmm_works(grad_w.device):
        torch.addmm(grad_w, g16.t(), h, out_dtype=torch.float32, out=grad_w)
    else:
        grad_w += g16.t() @ h  # a 16-bit temporary of the weight's size, accumulated in fp32


def chunk_loss_and_grad(
    logits: torch.Tensor, targets: torch.Tensor, grads: bool, bias_grad: bool, compute_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """One chunk's summed loss and, when ``grads``, the gradient of its logits (softmax minus one-hot,
    zero for ignored targets) in fp32 and its column sums in fp32 (the bias gradient, when
    ``bias_grad``). Works in place on ``logits`` (fp32). ``--compile`` compiles this function."""
    valid = targets != IGNORE_INDEX
    safe = torch.where(valid, targets, torch.zeros_like(targets)).unsqueeze(1)
    lse = torch.logsumexp(logits, dim=1)
    picked = logits.gather(1, safe).squeeze(1)
    loss = torch.where(valid, lse - picked, torch.zeros_like(lse)).sum()
    if not grads:
        return loss, None, None
    g = logits.sub_(lse.unsqueeze(1)).exp_()
    g.scatter_add_(1, safe, -valid.to(g.dtype).unsqueeze(1))
    g.mul_(valid.to(g.dtype).unsqueeze(1))
    return loss, g, (g.sum(0) if bias_grad else None)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk: int,
        compute_dtype: torch.dtype,
        kernel: Callable[..., Any],
    ) -> torch.Tensor:
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        grads = need_h or need_w or need_b
        n = hidden.shape[0]
        device = hidden.device
        loss = torch.zeros((), dtype=torch.float32, device=device)
        grad_h = torch.empty(hidden.shape, dtype=compute_dtype, device=device) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=device) if need_b else None
        w = weight.to(compute_dtype)
        with torch.autocast(device.type, enabled=False):
            for start in range(0, n, chunk):
                h = hidden[start : start + chunk].to(compute_dtype)
                logits = (h @ w.t()).float()
                if bias is not None:
                    logits += bias.float()
                part, g, gb = kernel(logits, targets[start : start + chunk], grads, grad_b is not None, compute_dtype)
                del logits
                loss += part
                if g is None:
                    continue
                if grad_b is not None:
                    grad_b += gb
                gc = g.to(compute_dtype)  # g itself when the compute dtype is fp32
                if grad_h is not None:
                    grad_h[start : start + chunk] = gc @ w
                if grad_w is not None:
                    add_weight_grad(grad_w, g, gc, h)
                del g, gc
        ctx.save_for_backward(
            *(x if x is not None else torch.empty(0, device=device) for x in (grad_h, grad_w, grad_b))
        )
        ctx.done = False
        ctx.present = (grad_h is not None, grad_w is not None, grad_b is not None)
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[Any, ...]:
        if ctx.done:
            raise RuntimeError("the chunked cross-entropy's backward runs once (its gradients are scaled in place)")
        ctx.done = True
        out: list[Any] = []
        for tensor, present, dtype in zip(ctx.saved_tensors, ctx.present, ctx.dtypes, strict=True):
            # Cast first (a 16-bit input gradient to the input's fp32): the scale (a GradScaler's 65536 is
            # beyond fp16) then multiplies in the returned dtype, in place: the gradients were computed for
            # this backward only, so no second copy of the weight's gradient is made.
            out.append(tensor.to(dtype).mul_(grad_loss) if present else None)
        return out[0], out[1], out[2], None, None, None, None


def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int | None = None,
    compute_dtype: torch.dtype | None = None,
    kernel: Callable[..., Any] | None = None,
) -> torch.Tensor:
    """Summed cross-entropy of ``hidden @ weight.T (+ bias)`` against ``targets`` (IGNORE_INDEX skipped),
    never holding more than one chunk of logits. ``hidden``: (tokens, width); ``targets``: (tokens,).
    ``compute_dtype``: the matmul dtype (default: autocast's when it is on, else ``hidden``'s); the softmax
    is fp32. Gradients flow to ``hidden``, ``weight`` and ``bias``."""
    hidden = hidden.reshape(-1, hidden.shape[-1])
    targets = targets.reshape(-1)
    if compute_dtype is None:
        device_type = hidden.device.type
        if torch.is_autocast_enabled(device_type):
            compute_dtype = torch.get_autocast_dtype(device_type)
        else:
            compute_dtype = hidden.dtype
    if chunk is None:
        chunk = chunk_tokens(hidden.shape[0], hidden.shape[1], weight.shape[0])
    if not torch.is_grad_enabled():  # evaluation: no gradients to compute along the way
        hidden, weight = hidden.detach(), weight.detach()
        bias = bias.detach() if bias is not None else None
    return _ChunkedLinearCrossEntropy.apply(
        hidden, weight, bias, targets, int(chunk), compute_dtype, kernel or chunk_loss_and_grad
    )


def compile_loss(head_loss: HeadLoss | None, backend: str = "inductor") -> bool:
    """Compile the chunked loss's per-chunk math (``--compile``); True when there was one to compile.
    Liger's loss is a fused kernel already; the plain path has :func:`compile_logits_loss`."""
    if head_loss is None or head_loss.kind != "chunked":
        return False
    kernel = torch.compile(chunk_loss_and_grad, backend=backend, fullgraph=True)
    head_loss.fn = functools.partial(chunked_linear_cross_entropy, kernel=kernel)
    return True


class UnsupportedLoss(ValueError):
    """``--loss-impl`` asks for a loss this model or device cannot run; the message says why."""


def _liger_loss() -> Callable[..., torch.Tensor] | None:
    """Liger's fused linear cross-entropy (summed), or None when ``liger-kernel`` is not installed."""
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except Exception:  # not installed, or no Triton for this device
        return None
    fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")

    def liger(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor) -> Any:
        device_type = hidden.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype
        h = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        out = fn(weight.to(dtype), h, targets.reshape(-1), bias.to(dtype) if bias is not None else None)
        return (out[0] if isinstance(out, tuple) else out).float()

    return liger


class HeadLoss:
    """The output head of one model, taught to return the summed loss instead of the logits while
    :meth:`pending` holds targets. The head module, its parameters and names are unchanged; only its
    ``forward`` (an instance attribute) is replaced."""

    def __init__(self, head: torch.nn.Linear, kind: str, fn: Callable[..., torch.Tensor]) -> None:
        self.head, self.kind, self.fn = head, kind, fn
        self.targets: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        plain = head.forward

        def forward(module: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
            if self.targets is None:
                return plain(hidden)
            self.loss = self.fn(hidden, module.weight, module.bias, self.targets)
            return self.loss

        head.forward = types.MethodType(forward, head)  # type: ignore[method-assign]  # this instance only

    @contextlib.contextmanager
    def pending(self, targets: torch.Tensor) -> Iterator[HeadLoss]:
        self.targets, self.loss = targets, None
        try:
            yield self
        finally:
            self.targets = None

    def take(self) -> torch.Tensor:
        loss, self.loss = self.loss, None
        if loss is None:
            raise RuntimeError("the model's forward did not call its output head; use --loss-impl plain")
        return loss


def head_loss_support(model: torch.nn.Module) -> tuple[torch.nn.Linear | None, str]:
    """(the output head, "") when the head may compute the loss itself, else (None, why not)."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type not in HEAD_ONLY_MODEL_TYPES:
        return None, f"model type {model_type!r} is not known to apply its head last"
    for name in LOGIT_TRANSFORMS:
        if getattr(cfg, name, None) not in (None, 0, 1, 1.0):
            return None, f"the model transforms its logits ({name})"
    head = output_head(model)
    if type(head) is not torch.nn.Linear:  # a LoRA-wrapped or quantised head computes differently
        return None, f"the output head is a {type(head).__name__}, not a plain Linear"
    return head, ""


def install(model: torch.nn.Module, impl: str, device: torch.device) -> tuple[HeadLoss | None, str]:
    """Make ``model``'s head compute the loss (``impl``: auto, chunked, liger, plain).

    Returns (the HeadLoss or None for the plain path, a short description for telemetry). ``auto``:
    Liger on CUDA when installed, else chunked where the model allows it, else plain. Asking for
    ``chunked`` or ``liger`` where it cannot run raises UnsupportedLoss naming the reason.
    """
    if impl == "plain":
        return None, "plain"
    head, why = head_loss_support(model)
    if head is None:
        if impl != "auto":
            raise UnsupportedLoss(f"--loss-impl {impl}: {why}")
        return None, "plain"
    if impl in ("auto", "liger") and device.type == "cuda":
        liger = _liger_loss()
        if liger is not None:
            return HeadLoss(head, "liger", liger), "liger"
        if impl == "liger":
            raise UnsupportedLoss("--loss-impl liger needs liger-kernel: pip install liger-kernel")
    elif impl == "liger":
        raise UnsupportedLoss("--loss-impl liger runs on CUDA only")
    return HeadLoss(head, "chunked", chunked_linear_cross_entropy), "chunked"


def shifted_targets(ids: torch.Tensor) -> torch.Tensor:
    """Next-token targets: the inputs shifted left, the last position ignored (no next token). Shifting
    the targets, not the logits, avoids copying the logits (``logits[:, :-1]``) every step."""
    return F.pad(ids[:, 1:], (0, 1), value=IGNORE_INDEX)


def causal_loss_sum(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    device: torch.device,
    autocast: Any,
    head_loss: HeadLoss | None = None,
    logits_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Summed next-token cross-entropy over a micro-batch: through ``head_loss`` when given (no full
    logits), else from the model's logits upcast to fp32 (``logits_loss``, default
    :func:`logits_cross_entropy`; its compiled form under ``--compile``)."""
    ids = batch["input_ids"].to(device, non_blocking=True)
    # position ids and the per-document attention mask of packed documents (trainer/packing.py)
    kwargs = packing.model_inputs(model, batch, device)
    # the data's targets (prompts and document ends are -100), else every next token
    targets = batch["targets"].to(device, non_blocking=True) if "targets" in batch else shifted_targets(ids)
    if head_loss is not None:
        with head_loss.pending(targets), autocast():
            model(input_ids=ids, **kwargs)
        return head_loss.take()
    with autocast():
        logits = model(input_ids=ids, **kwargs).logits
    return (logits_loss or logits_cross_entropy)(logits, targets)


def logits_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The plain path's loss: summed cross-entropy of the full logits, upcast to fp32. ``--compile``
    compiles it (:func:`compile_logits_loss`): the upcast, log-softmax and gather fuse, so the fp32 copy
    of the logits is not written out on its own."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


def compile_logits_loss(backend: str = "inductor") -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """:func:`logits_cross_entropy` compiled (one graph, no breaks), for the plain path under ``--compile``."""
    return torch.compile(logits_cross_entropy, backend=backend, fullgraph=True)


def loss_memory_bytes(tokens: int, vocab: int, hidden: int, compute_bytes: int, impl: str) -> int:
    """Peak bytes the next-token loss itself adds to a step (what a planner's logits term should count).

    ``plain``: tokens x vocabulary x 12 B: in backward the fp32 log-softmax kept from the forward, the
    fp32 gradient arriving at it and the one it returns live together (in the forward, 16-bit logits, their
    fp32 copy and the log-softmax: 10 B under autocast, 12 B in fp32 where the copy is the logits).
    ``chunked``: one chunk's logits, fp32 plus their 16-bit matmul output (or the 16-bit copy of their
    gradient), and the gradient of the head's input computed in the forward (tokens x hidden). The head
    weight's fp32 gradient, also computed in the forward, is not counted: every path holds it by the
    end of backward.
    """
    if impl == "plain":
        return tokens * vocab * 12
    chunk = chunk_tokens(tokens, hidden, vocab)
    extra = compute_bytes if compute_bytes != 4 else 0
    return chunk * vocab * (4 + extra) + tokens * hidden * compute_bytes
