"""No product module grows past ~600 lines unnoticed (issue 23): a longer one says why in the first lines of
its docstring ("Longer than 600 lines because ..."), or it is split into modules with one job each."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

LIMIT = 600
REASON = "longer than 600 lines because"


def test_every_long_module_states_its_reason_at_the_top() -> None:
    offenders = []
    for root in ("gpuplanner", "trainer"):
        for path in sorted((REPO_ROOT / root).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") <= LIMIT:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if REASON not in " ".join(doc.split()[:60]).lower():
                offenders.append(f"{path.relative_to(REPO_ROOT)}: {text.count(chr(10))} lines")
    assert offenders == [], "split these modules, or say at the top of each why it is longer"
