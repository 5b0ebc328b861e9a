"""The console examples of README.md and the user guide, run and compared with what they document.

    .venv/bin/python tools/update_doc_examples.py           # rewrite every drifted example in place
    .venv/bin/python tools/update_doc_examples.py --check   # only list the drifted ones (exit 1 if any)

An example is a fenced code block holding lines that start with ``$ gpuplanner``; each such command
(continued over lines ending in ``\\``) is followed by the output it documents, up to the next ``$``
line or the end of the block. Every example is run, in a fresh, empty data, settings and cache folder
(shipped catalog, no history, no overrides), as ``python -m gpuplanner ...`` with stdout and stderr
together, as a console shows them.

What "matches" means:
- each documented line equals the printed line (trailing spaces ignored); a line that is only ``...``
  stands for any number of printed lines (a documented excerpt), otherwise nothing may be left out;
- the figures that change with the calendar (``530 days old``) are compared as ``N days old``.

A block that cannot run here (it needs a history, a SkyPilot file, a GPU host, or it is a synopsis
with ``[--json]``) says so on the line before its fence: ``<!-- example: not run (why) -->``. A table
whose rows come from a history the example cannot have is marked ``<!-- example: header only (why) -->``:
it is run in the empty folder and only its columns (the first line's words) are compared. Every
other block with a ``$ gpuplanner`` line is run; tests/unit/test_readme.py fails on any drift, and this
tool rewrites the drifted blocks from the commands' real output (an excerpt keeps its ``...`` lines:
each documented run of lines is replaced by the printed lines from its first to its last line's shape).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# The documents whose examples are run: the README and the user guide.
DOCUMENTS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
NOT_RUN = re.compile(r"<!--\s*example:\s*not run\b.*-->")
HEADER_ONLY = re.compile(r"<!--\s*example:\s*header only\b.*-->")
ELLIPSIS = "..."
# Printed figures that change with the calendar, not with the code: compared in this form.
VOLATILE = ((re.compile(r"\b\d+ days old\b"), "N days old"),)


@dataclass(frozen=True)
class Command:
    """One ``$ gpuplanner ...`` line of an example and the output documented under it."""

    document: str
    line: int  # 1-based line of the ``$`` in the document
    source: tuple[str, ...]  # the command's lines as written (continuations included)
    argv: tuple[str, ...]  # the arguments after ``gpuplanner``
    documented: tuple[str, ...]  # the output lines as written
    header_only: bool = False  # only the table's columns are compared (its rows come from a history)


@dataclass(frozen=True)
class Example:
    """A fenced block with ``$ gpuplanner`` lines: its place in the document and its commands."""

    document: str
    start: int  # 0-based index of the first line inside the fence
    end: int  # 0-based index of the closing fence
    run: bool  # False where the line before the fence says ``<!-- example: not run (...) -->``
    commands: tuple[Command, ...]

    @property
    def name(self) -> str:
        return f"{self.document}:{self.start}"


def _fences(lines: list[str]) -> list[tuple[int, int]]:
    """(opening, closing) line indexes of the top-level fenced blocks."""
    blocks, opening = [], None
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            if opening is None:
                opening = index
            else:
                blocks.append((opening, index))
                opening = None
    return blocks


def _commands(document: str, body: list[str], first: int, header_only: bool) -> tuple[Command, ...]:
    commands: list[Command] = []
    index = 0
    while index < len(body):
        if not body[index].startswith("$ "):
            index += 1
            continue
        start = index
        source = [body[index]]
        while source[-1].endswith("\\") and index + 1 < len(body):
            index += 1
            source.append(body[index])
        index += 1
        output_start = index
        while index < len(body) and not body[index].startswith("$ "):
            index += 1
        text = " ".join(line.rstrip("\\").strip() for line in source)[2:]
        words = shlex.split(text, comments=True)
        if words[:1] == ["gpuplanner"]:
            commands.append(
                Command(
                    document=document,
                    line=first + start + 1,
                    source=tuple(source),
                    argv=tuple(words[1:]),
                    documented=tuple(body[output_start:index]),
                    header_only=header_only,
                )
            )
    return tuple(commands)


def _name(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def examples(path: Path) -> list[Example]:
    """The examples of one Markdown file."""
    document = _name(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for opening, closing in _fences(lines):
        before = next((line for line in reversed(lines[:opening]) if line.strip()), "")
        commands = _commands(document, lines[opening + 1 : closing], opening + 1, bool(HEADER_ONLY.search(before)))
        if not commands:
            continue
        found.append(Example(document, opening + 1, closing, not NOT_RUN.search(before), commands))
    return found


def all_examples() -> list[Example]:
    return [example for document in DOCUMENTS for example in examples(document)]


def isolated_env(base: Path) -> dict[str, str]:
    """An environment with empty settings, data and cache folders under ``base``, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANNER_")}
    env.update(
        GPUPLANNER_CONFIG_DIR=str(base / "config"),
        GPUPLANNER_DATA_DIR=str(base / "data"),
        GPUPLANNER_CACHE_DIR=str(base / "cache"),
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])),
        COLUMNS="100",
    )
    return env


def run(command: Command, base: Path) -> list[str]:
    """What the command prints (stdout and stderr in order), without trailing spaces and blank lines."""
    result = subprocess.run(
        [sys.executable, "-m", "gpuplanner", *command.argv],
        cwd=REPO_ROOT,
        env=isolated_env(base),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{command.document}:{command.line}: `gpuplanner {shlex.join(command.argv)}` exited with "
            f"{result.returncode}:\n{result.stdout}"
        )
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    while printed and not printed[-1]:
        printed.pop()
    return printed


def _normal(line: str) -> str:
    line = line.rstrip()
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return line


def _segments(documented: tuple[str, ...] | list[str]) -> list[list[str]]:
    """The documented lines split at ``...`` lines; an empty first/last segment means "anything before/after"."""
    segments: list[list[str]] = [[]]
    for line in documented:
        if line.strip() == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    trailing_blank = segments[-1]
    while trailing_blank and not trailing_blank[-1].strip():
        trailing_blank.pop()
    return segments


def mismatch(documented: tuple[str, ...] | list[str], printed: list[str]) -> str | None:
    """None when the documented output matches the printed one, else the first difference in words."""
    segments = [[_normal(line) for line in segment] for segment in _segments(documented)]
    out = [_normal(line) for line in printed]
    head, *middle_and_tail = segments
    if not middle_and_tail:
        return None if head == out else _first_difference(head, out, 0)
    *middle, tail = middle_and_tail
    if out[: len(head)] != head:
        return _first_difference(head, out, 0)
    cursor = len(head)
    for segment in middle:
        found = next(
            (i for i in range(cursor, len(out) - len(segment) + 1) if out[i : i + len(segment)] == segment), None
        )
        if found is None:
            return _closest(segment, out[cursor:], cursor)
        cursor = found + len(segment)
    if tail and (len(out) - cursor < len(tail) or out[len(out) - len(tail) :] != tail):
        return _first_difference(tail, out[max(cursor, len(out) - len(tail)) :], max(cursor, len(out) - len(tail)))
    return None


def compare(command: Command, printed: list[str]) -> str | None:
    """None when ``printed`` is what the command documents (its table's columns, for a header-only one)."""
    if not command.header_only:
        return mismatch(command.documented, printed)
    documented = command.documented[0].split() if command.documented else []
    columns = printed[0].split() if printed else []
    return None if documented == columns else f"documented columns: {documented}\n   printed columns: {columns}"


def _closest(segment: list[str], rest: list[str], offset: int) -> str:
    """Where an excerpt lines up best with what was printed (its most similar printed line), and the first difference."""
    matcher = difflib.SequenceMatcher(autojunk=False)
    best, start = 0.0, 0
    for index in range(len(rest)):
        matcher.set_seqs(segment[0], rest[index])
        if matcher.ratio() > best:
            best, start = matcher.ratio(), index
    return _first_difference(segment, rest[start:], offset + start)


def _first_difference(segment: list[str], rest: list[str], offset: int) -> str:
    for index, line in enumerate(segment):
        printed = rest[index] if index < len(rest) else "<nothing>"
        if line != printed:
            return f"documented: {line!r}\n   printed: {printed!r} (printed line {offset + index + 1})"
    extra = rest[len(segment)] if len(segment) < len(rest) else "<nothing>"
    return f"the documented output ends here; printed goes on: {extra!r}"


def _shape(line: str) -> str:
    return re.sub(r"\d[\d,.]*", "0", _normal(line)).strip()


def rewritten(documented: tuple[str, ...], printed: list[str]) -> list[str]:
    """The documented lines replaced by the printed ones, keeping each ``...`` excerpt's cuts.

    Each documented run of lines becomes the printed lines from the one shaped like its first line
    (figures aside) to the one shaped like its last, or as many lines as it had where no printed line
    has that shape (a table's rows); the first run starts at the top, the last one ends at the bottom.
    """
    segments = _segments(documented)
    if len(segments) == 1:
        return list(printed)
    ellipses = iter(line for line in documented if line.strip() == ELLIPSIS)
    shapes = [_shape(line) for line in printed]
    result: list[str] = []
    cursor = 0
    for number, segment in enumerate(segments):
        if number:
            result.append(next(ellipses))
        if not segment:
            continue
        start = _find(shapes, _shape(segment[0]), cursor) if number else 0
        if start is None:
            raise ValueError(f"cannot place the excerpt {segment[0]!r} in the new output: edit it by hand")
        if number == len(segments) - 1:
            end = len(printed) - 1
        else:
            # a table's rows change their shapes: then keep as many lines as the excerpt had
            end = _find(shapes, _shape(segment[-1]), start)
            end = min(start + len(segment), len(printed)) - 1 if end is None else end
        result.extend(printed[start : end + 1])
        cursor = end + 1
    return result


def _find(shapes: list[str], shape: str, start: int) -> int | None:
    return next((i for i in range(start, len(shapes)) if shapes[i] == shape), None)


def update(path: Path, check: bool, base: Path) -> list[str]:
    """Rewrite (or, with ``check``, only report) the drifted examples of one document; returns reports."""
    lines = path.read_text(encoding="utf-8").splitlines()
    reports = []
    # From the last command up, so that the line numbers of the ones above stay right.
    commands = [c for example in examples(path) if example.run for c in example.commands]
    for command in reversed(commands):
        printed = run(command, base)
        problem = compare(command, printed)
        if problem is None:
            continue
        reports.append(f"{command.document}:{command.line}: gpuplanner {shlex.join(command.argv)}\n  {problem}")
        if command.header_only:
            reports[-1] += "\n  (a header-only example: edit its columns and rows by hand)"
        elif not check:
            first = command.line - 1 + len(command.source)
            lines[first : first + len(command.documented)] = rewritten(command.documented, printed)
    if reports and not check:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drifted examples; exit 1 if any")
    parser.add_argument(
        "documents", nargs="*", type=Path, default=list(DOCUMENTS), help="default: README.md, docs/*.md"
    )
    args = parser.parse_args(argv)
    reports = []
    with tempfile.TemporaryDirectory(prefix="gpuplanner-doc-examples-") as base:
        for document in args.documents:
            reports += update(document.resolve(), args.check, Path(base))
    for report in reports:
        print(report)
    verb = "drifted" if args.check else "rewritten"
    print(f"{len(reports)} example command(s) {verb}")
    return 1 if reports and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
