"""Documents to tokens with a loss mask: chat templates, prompt masking, BOS and EOS per document.

A document becomes segments of text, each trained on or not: a text document is one trained segment; a
prompt/response pair is the prompt (not trained) then the response (trained), through the chat template
when there is one (as a user turn and an assistant turn), else joined as they are; a chat is rendered by
its template and only the assistant turns (their content and the template's end-of-turn text) are
trained. ``--train-on-prompt`` trains every segment.

The template: the tokenizer's own (``--chat-template auto``: ``apply_chat_template``) or a named one
(``chatml``). Chat data with neither is one clear error. The assistant spans are found by rendering the
conversation turn by turn (the text before assistant turn ``i`` is the rendering of the turns before it
with the generation prompt), so a template that does not render a conversation as a prefix of the longer
one cannot mask prompts: that is an error naming the row, not a silent guess.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .documents import DataError, Document
from .settings import CHAT_TEMPLATES

TARGET, START = 1, 2  # token flags: the token is a loss target; the token starts a document

Messages = Sequence[tuple[str, str]]
Render = Callable[[Messages, bool], str]


def chatml(messages: Messages, add_generation_prompt: bool) -> str:
    """ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``), the named fallback template."""
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def tokenizer_template(tokenizer: Any) -> str | None:
    """The chat template a tokenizer brings (None: it has none; the byte tokenizer never has one)."""
    tok = getattr(tokenizer, "tok", None)
    template = getattr(tok, "chat_template", None) if tok is not None else None
    return template if isinstance(template, str) and template.strip() else None


def resolve_template(name: str, tokenizer: Any) -> tuple[Render | None, str]:
    """(the render function or None, its description for the cache key and the log)."""
    if name == "chatml":
        return chatml, "chatml"
    if name != "auto":
        raise ValueError(f"--chat-template must be one of {', '.join(CHAT_TEMPLATES)}, got {name!r}")
    own = tokenizer_template(tokenizer)
    if own is None:
        return None, "none"
    tok = tokenizer.tok

    def render(messages: Messages, add_generation_prompt: bool) -> str:
        out = tok.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
        return str(out)

    return render, "tokenizer:" + own


def _join(prompt: str, response: str) -> str:
    """A prompt as it precedes its response without a template: a newline between them unless either
    side already has white space there."""
    if not prompt or prompt[-1].isspace() or not response or response[0].isspace():
        return prompt
    return prompt + "\n"


def segments(doc: Document, render: Render | None, tokenizer_name: str = "the tokenizer") -> list[tuple[str, bool]]:
    """(text, trained) pieces of ``doc``, in order."""
    if doc.kind == "text":
        return [(doc.text, True)]
    if doc.kind == "pair" and render is None:
        return [(_join(doc.prompt, doc.response), False), (doc.response, True)]
    messages = doc.messages if doc.kind == "chat" else (("user", doc.prompt), ("assistant", doc.response))
    if render is None:
        raise DataError(
            f"{doc.where}: messages: chat data needs a chat template and {tokenizer_name} has none; "
            "give --chat-template chatml"
        )
    return _chat_segments(messages, render, doc.where)


def _chat_segments(messages: Messages, render: Render, where: str) -> list[tuple[str, bool]]:
    def text(turns: Messages, gen: bool) -> str:
        try:
            return render(turns, gen)
        except Exception as exc:  # noqa: BLE001 (a template raises whatever its code raises)
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise DataError(f"{where}: messages: the chat template failed ({reason})") from None

    full = text(messages, False)
    out: list[tuple[str, bool]] = []
    pos = 0
    for i, (role, _) in enumerate(messages):
        if role != "assistant":
            continue
        head = text(messages[:i], True)
        upto = text(messages[: i + 1], False)
        if not (full.startswith(upto) and upto.startswith(head) and len(head) >= pos):
            raise DataError(
                f"{where}: messages: the chat template does not render this conversation turn by turn, so "
                "its prompts cannot be told from its answers; give --train-on-prompt or --chat-template chatml"
            )
        out += [(full[pos : len(head)], False), (full[len(head) : len(upto)], True)]
        pos = len(upto)
    out.append((full[pos:], False))
    return [(t, trained) for t, trained in out if t]


def special_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(ids a document starts with, ids it ends with) as the tokenizer defines them: what its own
    ``add_special_tokens`` puts around a text (BOS for Llama, nothing for GPT-2), and EOS to end every
    document when the tokenizer adds nothing at the end (the model must learn where a document stops).
    The byte tokenizer: no BOS, its EOS (256)."""
    tok = getattr(tokenizer, "tok", None)
    eos = [int(tokenizer.eos_token_id)]
    if tok is None:
        return [], eos
    plain = list(tok("a", add_special_tokens=False)["input_ids"])
    full = list(tok("a", add_special_tokens=True)["input_ids"])
    for at in range(len(full) - len(plain) + 1):
        if full[at : at + len(plain)] == plain:
            return full[:at], full[at + len(plain) :] or eos
    return [], eos


def encode(
    doc: Document,
    tokenizer: Any,
    render: Render | None,
    train_on_prompt: bool,
    bos: list[int],
    eos: list[int],
) -> tuple[list[int], list[int]]:
    """(token ids, per-token flags) of one document: BOS (never a target) unless the template already
    wrote it, the segments (targets where trained, or everywhere with ``train_on_prompt``), then EOS
    unless the document already ends with it (a target when the last segment is)."""
    who = f"the tokenizer of {tokenizer.name}" if hasattr(tokenizer, "tok") else "the byte tokenizer"
    parts = segments(doc, render, who)
    ids: list[int] = []
    flags: list[int] = []
    bos_text = getattr(getattr(tokenizer, "tok", None), "bos_token", None)
    if bos and not (doc.kind != "text" and render is not None and bos_text and parts[0][0].startswith(bos_text)):
        ids += bos
        flags += [0] * len(bos)
    last = False
    for text, trained in parts:
        piece = tokenizer.encode(text)
        last = trained or train_on_prompt
        ids += piece
        flags += [TARGET if last else 0] * len(piece)
    if ids[-len(eos) :] != eos:
        ids += eos
        flags += [TARGET if last else 0] * len(eos)
    flags[0] |= START
    return ids, flags
