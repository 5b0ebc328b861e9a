"""One home per figure: a scan of the product code (``gpuplanner/`` and ``trainer/``) that fails when a new
copy of a figure's arithmetic or formatting appears, and names the home to call instead.

- the price of an instance-hour (price per GPU-hour x GPUs) and the spend clock (price x GPUs x seconds
  / 3600): ``trainer/spend.py`` (``instance_hour_usd``, ``spend_usd``, ``cost_for_hours``,
  ``SpendClock``, ``cap_reached``), which the trainer, the command monitor and all of ``gpuplanner`` use;
- a run's cost, "no price" and sums with ``unpriced_runs``: ``gpuplanner/history/run_cost.py``;
- dollars and durations for people: ``gpuplanner/export/human.py`` (``human_money``, ``human_cost``,
  ``human_rate``, ``usd_cell``, ``human_duration``, ``human_hours``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO_ROOT

PRICE = re.compile(r"price|usd_per_gpu_hour")
GPUS = re.compile(r"\bgpus\b|gpu_count|billed_gpus|\bworld\b|_gpus\b|\bnodes\b")
SECONDS_PER_HOUR = {3600}

SPEND_HOME = "trainer/spend.py"
HUMAN_HOME = "gpuplanner/export/human.py"
# No known exceptions left: every copy calls its home.
KNOWN: set[tuple[str, str]] = set()
KNOWN_DURATIONS: set[str] = set()


def product_files() -> list[Path]:
    return sorted(
        p for root in ("gpuplanner", "trainer") for p in (REPO_ROOT / root).rglob("*.py") if "_resources" not in p.parts
    )


HOME_CALLS = {"instance_hour_usd", "spend_usd", "cost_for_hours", "run_cost_usd", "priced_spend"}


def _factors(node: ast.expr, divisor: bool = False) -> list[tuple[ast.expr, bool]]:
    """The operands of a chain of ``*`` and ``/`` with whether each divides (``a * b / c`` -> a, b, /c)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        return _factors(node.left, divisor) + _factors(node.right, divisor ^ isinstance(node.op, ast.Div))
    return [(node, divisor)]


def _words(node: ast.expr) -> str:
    """The names an operand is made of (attributes included, calls to the homes left out), lower case."""
    skip: set[int] = set()
    for n in ast.walk(node):
        func = n.func if isinstance(n, ast.Call) else None
        if func is not None and (getattr(func, "id", None) or getattr(func, "attr", None)) in HOME_CALLS:
            skip.update(id(m) for m in ast.walk(n))
    return " ".join(
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in skip
    ).lower()


def arithmetic_copies(tree: ast.AST) -> list[tuple[int, str]]:
    """Products of a price per GPU-hour with GPUs (the instance price) or with time over 3600 (the spend
    clock), in one chain of ``*`` and ``/``."""
    found = []
    inner: set[int] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div))) or id(node) in inner:
            continue
        factors = _factors(node)
        inner.update(id(n) for n in ast.walk(node) if n is not node)
        words = [(_words(f), divides) for f, divides in factors]
        if not any(PRICE.search(w) and not divides for w, divides in words):
            continue
        if any(isinstance(f, ast.Constant) and f.value in SECONDS_PER_HOUR and divides for f, divides in factors):
            found.append((node.lineno, "spend clock"))
        elif any(GPUS.search(w) and not PRICE.search(w) and not divides for w, divides in words):
            found.append((node.lineno, "instance price"))
    return found


def dollar_formatting(tree: ast.AST) -> list[int]:
    """f-strings that write dollars themselves: a literal ending in "$" before a formatted number."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        for before, value in zip(node.values, node.values[1:]):
            if (
                isinstance(before, ast.Constant)
                and isinstance(before.value, str)
                and before.value.endswith("$")
                and isinstance(value, ast.FormattedValue)
                and value.format_spec is not None
            ):
                lines.append(node.lineno)
    return lines


def _splits_seconds(value: ast.FormattedValue) -> bool:
    return any(
        isinstance(op, ast.BinOp)
        and isinstance(op.op, (ast.FloorDiv, ast.Mod))
        and isinstance(op.right, ast.Constant)
        and op.right.value in (60, 3600, 86400)
        for op in ast.walk(value.value)
    )


def duration_formatting(tree: ast.AST) -> list[int]:
    """f-strings that split seconds into hours and minutes themselves (``{s // 3600}h{s % 3600 // 60}m``:
    two or more parts of one f-string)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and sum(isinstance(v, ast.FormattedValue) and _splits_seconds(v) for v in node.values) >= 2
    ]


def test_no_duration_formatting_outside_export_human() -> None:
    copies = []
    for path in product_files():
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel == HUMAN_HOME or rel in KNOWN_DURATIONS:
            continue
        copies += [f"{rel}:{line}" for line in duration_formatting(ast.parse(path.read_text(), rel))]
    assert not copies, (
        "a duration split into hours/minutes by hand; call gpuplanner/export/human.py: human_duration, "
        "human_hours or human_clock (to the second):\n" + "\n".join(copies)
    )


def test_no_copy_of_the_instance_price_or_the_spend_clock() -> None:
    copies = []
    for path in product_files():
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel == SPEND_HOME:
            continue
        for line, what in arithmetic_copies(ast.parse(path.read_text(), rel)):
            if (rel, what) not in KNOWN:
                copies.append(f"{rel}:{line}: {what}")
    assert not copies, (
        "price x GPUs (x time) written out again; call trainer/spend.py (instance_hour_usd, spend_usd, "
        "cost_for_hours, SpendClock), or history/run_cost.py for a run's cost:\n" + "\n".join(copies)
    )


def test_no_dollar_formatting_outside_export_human() -> None:
    copies = []
    for path in product_files():
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel in (HUMAN_HOME, SPEND_HOME):  # trainer/ cannot import gpuplanner: its budget words live there
            continue
        copies += [f"{rel}:{line}" for line in dollar_formatting(ast.parse(path.read_text(), rel))]
    assert not copies, (
        'dollars formatted by hand (f"${x:,.2f}"); call gpuplanner/export/human.py: human_money(usd, places), '
        'human_cost ("no price" for None), human_rate (per GPU-hour) or usd_cell:\n' + "\n".join(copies)
    )


def test_the_scan_finds_what_it_bans() -> None:
    """The scan itself: each banned shape is found, the calls to the homes are not."""
    code = (
        "a = offer.usd_per_gpu_hour * offer.billed_gpus\n"
        "b = self.args.price_per_gpu_hour * gpus * this / 3600.0\n"
        "c = hours * price\n"
        'd = f"spent ${spend:,.2f}"\n'
        "e = instance_hour_usd(price, gpus) * hours\n"
        'f = f"{human_money(x)} and ${y}"\n'
        'g = f"{s // 3600}h{s % 3600 // 60:02d}m"\n'
        "h = price / gpus\n"
        'i = f"--time={limit_s // 60 + 1}"\n'
    )
    tree = ast.parse(code)
    assert arithmetic_copies(tree) == [(1, "instance price"), (2, "spend clock")]
    assert dollar_formatting(tree) == [4]
    assert duration_formatting(tree) == [7]
