"""Data as users have it (issue 28 item 1): chat and prompt/response rows, Parquet and saved datasets,
chat templates, loss only on answers, documents kept apart when packed, a seeded random held-out split,
and one clear line for mis-shaped data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import TINY_GPT2, base_args, cli_args, final_weights, make_config, read_events, trainer_env
from tests.trainer.test_cli_and_ddp import _free_port
from trainer import data as data_mod
from trainer import packing
from trainer.chat import START, TARGET, chatml
from trainer.documents import DataError, iter_documents
from trainer.loop import EXIT_CONFIG, EXIT_OK, train

BYTES = data_mod.ByteTokenizer()
CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye?"},
        {"role": "assistant", "content": "Bye."},
    ]
}
TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 257,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def trained_text(data: data_mod.PackedData, n: int) -> list[str]:
    """The bytes each of the first ``n`` sequences is trained to predict, as text (targets only)."""
    targets = data.batch(np.arange(n))["targets"]
    return [bytes(int(t) for t in row if 0 <= t < 256).decode() for row in targets]


def test_chat_rows_train_only_on_assistant_turns(tmp_path: Path) -> None:
    files = [write_jsonl(tmp_path / "chat.jsonl", [CHAT])]
    corpus = data_mod.tokenize_cached(files, BYTES, "text", tmp_path / "cache", chat_template="chatml")
    text = chatml([(m["role"], m["content"]) for m in CHAT["messages"]], False)
    assert bytes(int(t) for t in corpus.tokens[:-1]).decode() == text and corpus.tokens[-1] == 256
    data = data_mod.pack(corpus, len(corpus.tokens), 256, documents=True)
    targets = data.batch(np.arange(1))["targets"][0]
    ids = data.batch(np.arange(1))["input_ids"][0]
    # the labels: -100 on every prompt token, the next token on each answer (with its end-of-turn and EOS)
    trained = [(i, int(t)) for i, t in enumerate(targets) if t != -100]
    assert bytes(t for _, t in trained if t < 256).decode() == "Hello!<|im_end|>\nBye.<|im_end|>\n"
    assert trained[-1][1] == 256  # the document's EOS is the last answer's target
    assert all(int(ids[i + 1]) == t for i, t in trained)
    first = text.index("Hello!")
    assert int((targets[: first - 1] != -100).sum()) == 0  # nothing before the first answer
    # a config-built model (byte tokenizer) has no template: one line, naming the row
    with pytest.raises(
        DataError, match=r"chat\.jsonl:1: messages: .* the byte tokenizer has none; give --chat-template"
    ):
        data_mod.tokenize_cached(files, BYTES, "text", tmp_path / "c3")
    # --train-on-prompt: every next token is a target
    everything = data_mod.tokenize_cached(files, BYTES, "text", tmp_path / "c2", "chatml", train_on_prompt=True)
    assert (everything.flags & TARGET).all()


def test_prompt_response_and_instruction_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": "2+2=", "response": "4"},
        {"instruction": "Add.", "input": "1 and 2", "output": "3"},
        {"instruction": "Say yes.", "output": " yes"},
    ]
    files = [write_jsonl(tmp_path / "pairs.jsonl", rows)]
    corpus = data_mod.tokenize_cached(files, BYTES, "text", tmp_path / "cache")  # no template: joined as is
    assert corpus.instruction and corpus.kinds == {"text": 0, "pair": 3, "chat": 0}
    data = data_mod.pack(corpus, len(corpus.tokens), 256, documents=True)
    assert trained_text(data, 1) == ["4" + "3" + " yes"]  # only the responses (and their EOS, not text)
    assert corpus_docs(corpus) == ["2+2=\n4", "Add.\n\n1 and 2\n3", "Say yes. yes"]
    # with a template, a pair is a user turn and an assistant turn
    templated = data_mod.tokenize_cached(files, BYTES, "text", tmp_path / "c2", chat_template="chatml")
    assert corpus_docs(templated)[0] == "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"


def test_a_text_file_is_one_document_with_one_eos(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("First paragraph.\n\nSecond one.\n\n\nThird.\n", encoding="utf-8")
    corpus = data_mod.tokenize_cached([tmp_path / "notes.txt"], BYTES, "text", tmp_path / "cache")
    tokens = np.asarray(corpus.tokens)
    assert int((tokens == 256).sum()) == 1 and tokens[-1] == 256
    assert bytes(int(t) for t in tokens[:-1]).decode() == "First paragraph.\n\nSecond one.\n\n\nThird."
    assert int((np.asarray(corpus.flags) & START).astype(bool).sum()) == 1 and not corpus.instruction


def hf_tokenizer(tmp_path: Path, template: str | None) -> data_mod.HFTokenizer:
    """A real fast tokenizer (word level) that adds BOS by its own settings, saved and loaded back."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "hi", "hello", "there", "!", "?", "a"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>"]})
    if template:
        fast.chat_template = template
    fast.save_pretrained(tmp_path / "tok")
    loaded = data_mod.load_tokenizer(str(tmp_path / "tok"))
    assert isinstance(loaded, data_mod.HFTokenizer)
    return loaded


def test_the_tokenizers_own_bos_and_chat_template(tmp_path: Path) -> None:
    template = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    tok = hf_tokenizer(tmp_path, template)
    text = write_jsonl(tmp_path / "t.jsonl", [{"text": "hello there"}])
    corpus = data_mod.tokenize_cached([text], tok, "text", tmp_path / "c1")
    assert list(corpus.tokens) == [1, 6, 7, 2]  # BOS (the tokenizer adds it), the text, EOS
    assert list(corpus.flags) == [START, TARGET, TARGET, TARGET]  # BOS is never a target
    chat = write_jsonl(
        tmp_path / "c.jsonl",
        [{"messages": [{"role": "user", "content": "hi ?"}, {"role": "assistant", "content": "hello !"}]}],
    )
    corpus = data_mod.tokenize_cached([chat], tok, "text", tmp_path / "c2")  # auto: the tokenizer's template
    # one BOS (the template writes it), the user turn masked, the answer trained, then EOS
    assert list(corpus.tokens) == [1, 3, 5, 9, 4, 6, 8, 2]
    assert [int(f) & TARGET for f in corpus.flags] == [0, 0, 0, 0, 0, 1, 1, 1]
    # chat data without a template: one clear error naming the row
    plain = hf_tokenizer(tmp_path / "plain", None)
    with pytest.raises(
        DataError, match=r"c\.jsonl:1: messages: chat data needs a chat template .*--chat-template chatml"
    ):
        data_mod.tokenize_cached([chat], plain, "text", tmp_path / "c3")


def tiny_model(kind: str, attn: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**(TINY_LLAMA if kind == "llama" else {**TINY_GPT2, "n_positions": 128}))
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.eval()


@pytest.mark.parametrize(("kind", "attn"), [("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa")])
def test_packed_documents_do_not_attend_across(tmp_path: Path, kind: str, attn: str) -> None:
    rows = [{"text": "The first document."}, {"text": "A second, longer document here."}, {"text": "Third!"}]
    corpus = data_mod.tokenize_cached([write_jsonl(tmp_path / "d.jsonl", rows)], BYTES, "text", tmp_path / "c")
    n = len(corpus.tokens)
    model = tiny_model(kind, attn)
    packed = data_mod.pack(corpus, n, 256, documents=True).batch(np.arange(1))
    with torch.no_grad():
        logits = model(input_ids=packed["input_ids"], **packing.model_inputs(model, packed, torch.device("cpu"))).logits
        starts = list(np.flatnonzero(np.asarray(corpus.flags) & START)) + [n]
        for lo, hi in zip(starts, starts[1:], strict=False):
            alone = model(input_ids=packed["input_ids"][:, lo:hi]).logits
            torch.testing.assert_close(logits[:, lo:hi], alone, rtol=1e-5, atol=1e-5)
        # the check can fail: packed as one stream, the second document sees the first
        stream = model(input_ids=packed["input_ids"]).logits
        assert not torch.allclose(stream[:, starts[1] : starts[2]], logits[:, starts[1] : starts[2]], atol=1e-3)
    assert packed["position_ids"][0, starts[1]] == 0 and packed["document_ids"][0, -1] == 2


def test_step_targets_count_what_the_loss_sums(tmp_path: Path) -> None:
    rows = [CHAT, {"prompt": "Question number seven?", "response": "Seven."}] * 12
    corpus = data_mod.tokenize_cached(
        [write_jsonl(tmp_path / "c.jsonl", rows)], BYTES, "text", tmp_path / "c", "chatml"
    )
    data = data_mod.pack(corpus, 48, 256, documents=True)
    world, steps = 2, 3
    plans = [data_mod.StepPlan(data, 5, data_mod.Position(), 2, 2, world, r, steps) for r in range(world)]
    from trainer.step import target_count

    for s in range(steps):
        counted = sum(target_count(p[s * 2 + k]) for p in plans for k in range(2))
        assert plans[0].step_targets(s) == plans[1].step_targets(s) == counted
        assert 0 < counted < 8 * 47  # prompts are not targets


def corpus_docs(corpus: data_mod.Corpus) -> list[str]:
    tokens, flags = np.asarray(corpus.tokens), np.asarray(corpus.flags)
    starts = np.flatnonzero(flags & START)
    return [bytes(int(t) for t in d[:-1]).decode() for d in np.split(tokens, starts[1:])]


def test_the_held_out_split_is_random_seeded_whole_documents(tmp_path: Path) -> None:
    rows = [{"text": f"document number {i} " + "x" * (i % 7)} for i in range(60)]
    corpus = data_mod.tokenize_cached([write_jsonl(tmp_path / "d.jsonl", rows)], BYTES, "text", tmp_path / "c")
    train_a, held_a = data_mod.split_cached(corpus, 0.1, 3, tmp_path / "c")
    again = data_mod.split_cached(corpus, 0.1, 3, tmp_path / "other")[1]
    other = data_mod.split_cached(corpus, 0.1, 4, tmp_path / "c")[1]
    assert held_a is not None and again is not None and other is not None
    held, train_docs = corpus_docs(held_a), corpus_docs(train_a)
    assert held == corpus_docs(again) and held != corpus_docs(other)  # seeded
    assert sorted(held + train_docs) == sorted(r["text"] for r in rows) and not set(held) & set(train_docs)
    assert held != [r["text"] for r in rows][-len(held) :]  # not the tail
    share = len(held_a.tokens) / len(corpus.tokens)
    assert 0.1 <= share < 0.1 + 40 / len(corpus.tokens)  # about the fraction: whole documents
    data = data_mod.pack(train_a, 16, 256, documents=True, held_out=held_a)
    assert data.n_eval == -(-len(held_a.tokens) // 16)
    last = data.batch(np.array([data.n_total - 1]))  # the padded last held-out sequence trains nothing past the end
    pad = 16 * data.n_eval - len(held_a.tokens)
    assert pad == 0 or (last["targets"][0, -pad - 1 :] == -100).all()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]}', r"messages\[1\]\.role"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "messages: no assistant turn"),
        ('{"messages": [{"role": "assistant", "content": 5}]}', r"messages\[0\]\.content: must be a string"),
        ('{"prompt": "q"}', "response: missing"),
        ('{"instruction": "q", "output": ["a"]}', "output: must be a string"),
        ('{"body": "x"}', "no field 'text'"),
        ("[1, 2]", "a row must be an object"),
        ('{"text": "cut', "not JSON"),
    ],
)
def test_a_mis_shaped_row_names_file_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "fine"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{path}:3: .*{message}") as err:
        list(iter_documents([path], "text"))
    assert "\n" not in str(err.value)


def test_bad_data_trains_nothing_and_says_one_line(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(CHAT) + "\n" + '{"messages": [{"role": "user"}]}\n', encoding="utf-8")
    cfg = make_config(tmp_path / "run", model_config, data=[str(bad)], chat_template="chatml")
    assert train(cfg) == EXIT_CONFIG
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    # the one line about the data (after the first log line saying the model trains on bytes)
    assert err[-1] == f"trainer: {bad}:2: messages[0].content: missing" and len(err) == 2, err
    assert not (tmp_path / "run" / "final").exists()
    assert read_events(tmp_path / "run")[-1]["status"] == "failed"
    (tmp_path / "latin.txt").write_bytes("caf\xe9\nna\xefve".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.txt:1: not UTF-8 text"):
        list(iter_documents([tmp_path / "latin.txt"], "text"))


def test_parquet_and_saved_datasets_read_as_jsonl(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"prompt": "p1", "response": "r1"}, {"prompt": "p2", "response": "r2"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    want = list(iter_documents([write_jsonl(tmp_path / "pairs.jsonl", rows)], "text"))
    got = list(iter_documents(data_mod.data_files([str(tmp_path / "pairs.parquet")]), "text"))
    assert [(d.kind, d.prompt, d.response) for d in got] == [(d.kind, d.prompt, d.response) for d in want]
    assert got[1].where == f"{tmp_path / 'pairs.parquet'}:row 2"
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list([CHAT])}).save_to_disk(str(tmp_path / "ds"))
    files = data_mod.data_files([str(tmp_path / "ds")])
    assert files == [tmp_path / "ds"]
    (doc,) = iter_documents(files, "text")
    assert doc.kind == "chat" and doc.messages[2] == ("assistant", "Hello!") and doc.where.endswith("[train]:row 1")
    bad = [{"prompt": "p", "response": None, "text": None}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet:row 1: response: missing"):
        list(iter_documents([tmp_path / "bad.parquet"], "text"))


@pytest.mark.slow
def test_a_chat_fine_tune_of_a_tiny_llama(tmp_path: Path) -> None:
    """End to end: chat JSONL, ChatML, prompts masked, documents kept apart by default, a held-out file."""
    cfg_path = tmp_path / "llama.json"
    cfg_path.write_text(json.dumps(TINY_LLAMA))
    talk = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} plus {i}?"},
                {"role": "assistant", "content": f"{2 * i}."},
            ]
        }
        for i in range(40)
    ]
    train_file = write_jsonl(tmp_path / "train.jsonl", talk[:32])
    eval_file = write_jsonl(tmp_path / "eval.jsonl", talk[32:])
    run = tmp_path / "run"
    cfg = make_config(
        run,
        cfg_path,
        data=[str(train_file)],
        eval_data=[str(eval_file)],
        chat_template="chatml",
        seq_len=64,
        micro_batch=2,
        max_steps=6,
        eval_every_steps=3,
    )
    assert train(cfg) == EXIT_OK
    events = read_events(run)
    start = events[0]
    held = data_mod.tokenize_cached([eval_file], BYTES, "text", tmp_path / "c", "chatml")
    assert start["eval_sequences"] == -(-len(held.tokens) // 64)
    assert start["packing"] == "documents" and start["eval_split"] == "eval-data"  # chat data: kept apart
    evals = [e for e in events if e["kind"] == "eval"]
    assert [e["step"] for e in evals] == [3, 6] and all(np.isfinite(e["eval_loss"]) for e in evals)
    assert (run / "final" / "model.safetensors").exists()


def _torchrun(args: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(_free_port()), "-m", "trainer", "train", *cli_args(args)]
    return subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_two_rank_ddp_on_masked_chat_data_matches_one_process(tmp_path: Path) -> None:
    """Ranks see different numbers of answer tokens; each step is normalised by the step's count over all
    ranks, so 2 ranks x micro-batch 2 train the weights 1 process x micro-batch 4 does."""
    cfg_path = tmp_path / "llama.json"
    cfg_path.write_text(json.dumps(TINY_LLAMA))
    talk = [
        {"messages": [{"role": "user", "content": "Say " + "ab" * (i % 5)}, {"role": "assistant", "content": "x" * i}]}
        for i in range(1, 30)
    ]
    data = write_jsonl(tmp_path / "chat.jsonl", talk)
    common = {"data": [str(data)], "chat_template": "chatml", "seq_len": 48, "grad_accum": 2, "max_steps": 3}
    out = _torchrun(base_args(tmp_path / "ddp", cfg_path, micro_batch=2, **common))
    assert out.returncode == 0, out.stderr[-3000:]
    single = make_config(tmp_path / "one", cfg_path, micro_batch=4, **common)
    assert train(single) == EXIT_OK
    a, b = final_weights(tmp_path / "ddp"), final_weights(tmp_path / "one")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5)
    # a mis-shaped row: both ranks stop at once, rank 0 names the row
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text() + '{"messages": [{"role": "assistant", "content": 1}]}\n')
    out = _torchrun(base_args(tmp_path / "bad", cfg_path, **{**common, "data": [str(bad)]}))
    assert out.returncode != 0 and f"{bad}:30: messages[0].content: must be a string" in out.stderr
    said = sorted(line for line in out.stderr.splitlines() if line.startswith("trainer: ") and "tokenizer" not in line)
    assert said == [  # one whole line from each rank (trainer.telemetry.warn writes each line at once)
        f"trainer: {bad}:30: messages[0].content: must be a string, got int",
        "trainer: the data cannot be read: the rank that tokenises it says why",
    ], out.stderr[-3000:]
    assert not (tmp_path / "bad" / "final").exists()
