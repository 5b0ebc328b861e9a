"""The GPU check's outputs: ``results.json`` (one record per configuration), ``summary.md`` (a table),
and ``--record``: a measured run's rows appended to ``tests/data/measured/gpu_check.csv``.

Errors are the planner's, in %: ``(predicted / measured - 1) x 100`` (the convention of
``tests/benchmarks/planner_accuracy.py``): positive where the planner says more than was measured.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from tests.gpu.predict import CHECKPOINTING

SCHEMA = 1
GIB = 1024**3
MEASURED_CSV = Path(__file__).resolve().parents[1] / "data" / "measured" / "gpu_check.csv"
# what is compared: measured key -> predicted key of the same meaning
COMPARED = {
    "tokens_per_s": "tokens_per_s",
    "peak_allocated_bytes": "peak_allocated_bytes",
    "peak_reserved_bytes": "peak_reserved_bytes",
    "smi_used_max_bytes": "smi_used_max_bytes",
}
CSV_COLUMNS = (
    "gpu",
    "gpu_catalog",
    "date",
    "commit",
    "driver",
    "torch",
    "config",
    "engine",
    "shape",
    "method",
    "lora_rank",
    "lora_targets",
    "precision",
    "checkpointing",
    "compile",
    "seq_len",
    "micro_batch",
    "tokens_per_s",
    "step_time_s",
    "mfu",
    "hfu",
    "peak_allocated_gib",
    "peak_reserved_gib",
    "smi_used_gib",
    "predicted_tokens_per_s",
    "predicted_allocated_gib",
)


def error_pct(predicted: Any, measured: Any) -> float | None:
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (predicted, measured))
    return (predicted / measured - 1.0) * 100.0 if ok and measured > 0 else None


def errors(predicted: dict[str, Any] | None, measured: dict[str, Any] | None) -> dict[str, float | None]:
    if not predicted or not measured:
        return {}
    return {key: error_pct(predicted.get(p), measured.get(key)) for key, p in COMPARED.items()}


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _gib(value: Any) -> str:
    return f"{value / GIB:.1f}" if isinstance(value, (int, float)) else "-"


def _pct(value: Any) -> str:
    return f"{value:+.0f}%" if isinstance(value, (int, float)) else "-"


def summary_markdown(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [
        f"# GPU check{' (dry run: CPU, tiny shapes, fake NVML: no figure here is a GPU measurement)' if env['dry_run'] else ''}"
        f"{'' if doc.get('complete', True) else ' (in progress or cut off: later configurations missing)'}",
        "",
        f"GPU: {env['gpu_name'] or '-'} (planned as {env['gpu_catalog'] or '-'}), driver {env['driver'] or '-'}, "
        f"torch {env['torch']}, transformers {env['transformers']}, peft {env['peft']}, "
        f"commit {env['commit']}, {env['date']}, {doc['wall_s']:.0f} s of {doc['time_limit_s']:.0f} s.",
        "",
        "| config | status | tokens/s | pred. | err | step s | MFU | HFU | alloc GiB | pred. | err | "
        "reserved GiB | smi GiB | pred. | err | vs HF |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in doc["records"]:
        m, p, e = rec.get("measured") or {}, rec.get("predicted") or {}, rec.get("errors") or {}
        status = rec["status"] if rec["status"] != "skipped" else f"skipped: {rec['reason']}"
        lines.append(
            f"| {rec['name']} | {status} | {_fmt(m.get('tokens_per_s'))} | {_fmt(p.get('tokens_per_s'))} | "
            f"{_pct(e.get('tokens_per_s'))} | {_fmt(m.get('step_time_s'), 3)} | {_fmt(m.get('mfu'), 3)} | "
            f"{_fmt(m.get('hfu'), 3)} | {_gib(m.get('peak_allocated_bytes'))} | {_gib(p.get('peak_allocated_bytes'))} | "
            f"{_pct(e.get('peak_allocated_bytes'))} | {_gib(m.get('peak_reserved_bytes'))} | "
            f"{_gib(m.get('smi_used_max_bytes'))} | {_gib(p.get('smi_used_max_bytes'))} | "
            f"{_pct(e.get('smi_used_max_bytes'))} | {_fmt(rec.get('ratio_ours_over_hf'), 2)} |"
        )
    timed = [r for r in doc["records"] if (r.get("measured") or {}).get("phases_s")]
    if timed:
        lines += [
            "",
            "Where each bundled-trainer run's time went (s, the trainer's phases; data wait: share of the measured span):",
            "",
            "| config | wall | startup | compile | data | train | data wait |",
            "|---|---|---|---|---|---|---|",
        ]
        for rec in timed:
            m, ph = rec["measured"], rec["measured"]["phases_s"]
            lines.append(
                f"| {rec['name']} | {_fmt(m.get('wall_s'), 1)} | {_fmt(ph.get('startup'), 1)} | "
                f"{_fmt(ph.get('compile'), 1)} | {_fmt(ph.get('data'), 1)} | {_fmt(ph.get('train'), 1)} | "
                f"{_fmt(m.get('data_wait_share'), 3)} |"
            )
    for rec in doc["records"]:
        if rec.get("oom_probe"):
            lines += ["", f"OOM probe {rec['name']}: {rec.get('oom_verdict', '-')}"]
        nv = (rec.get("measured") or {}).get("nvml")
        if nv:
            lines += [
                "",
                f"NVML sampler vs nvidia-smi during {rec['name']} ({nv['samples']} paired samples, GPM "
                f"{'reported' if nv['gpm'] else 'not reported'}, {nv['nvlink_links']} NVLink links"
                f"{', simulated source' if nv['simulated'] else ''}):",
                "",
                "| field | nvidia-smi field | pairs | NVML mean | smi mean | mean abs diff | max abs diff |",
                "|---|---|---|---|---|---|---|",
            ]
            for field, b in nv["both"].items():
                if field == "throttle_reasons":
                    lines.append(
                        f"| throttle_reasons | {b['smi_field']} | {b['pairs']} | {', '.join(b['nvml_names']) or '-'} | "
                        f"{', '.join(b['smi_names']) or '-'} | {b['agree']} of {b['pairs']} agree | |"
                    )
                else:
                    lines.append(
                        f"| {field} | {b['smi_field']} | {b['pairs']} | {_fmt(b['nvml_mean'], 1)} | "
                        f"{_fmt(b['smi_mean'], 1)} | {_fmt(b['mean_abs_diff'], 1)} | {_fmt(b['max_abs_diff'], 1)} |"
                    )
            for field, s in nv["nvml_only"].items():
                lines.append(f"| {field} | (NVML only) | {s['n']} | {_fmt(s.get('mean'), 1)} | | | |")
    skipped = [r for r in doc["records"] if r["status"] != "measured"]
    if skipped:
        lines += ["", "Not measured:"] + [f"- {r['name']}: {r['status']}: {r.get('reason') or '-'}" for r in skipped]
    return "\n".join(lines) + "\n"


def write(out: Path, doc: dict[str, Any]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    text = summary_markdown(doc)
    (out / "summary.md").write_text(text, encoding="utf-8")
    return text


def csv_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The measured configurations of a results.json as rows of ``gpu_check.csv``."""
    env, out = doc["environment"], []
    for rec in doc["records"]:
        if rec["status"] != "measured":
            continue
        m, p, s = rec["measured"], rec.get("predicted") or {}, rec["settings"]

        def num(value: Any, scale: float = 1.0) -> str:
            return f"{value / scale:.6g}" if isinstance(value, (int, float)) else ""

        out.append(
            {
                "gpu": env["gpu_name"] or "",
                "gpu_catalog": env["gpu_catalog"] or "",
                "date": env["date"][:10],
                "commit": env["commit"],
                "driver": env["driver"] or "",
                "torch": env["torch"],
                "config": rec["name"],
                "engine": "hf-trainer" if s["kind"] == "hf" else "bundled",
                "shape": s["shape"],
                "method": s["method"],
                "lora_rank": str(s["lora_rank"]) if s["method"] != "full" else "",
                "lora_targets": " ".join(s["lora_targets"]) if s["method"] != "full" else "",
                "precision": s["precision"],
                "checkpointing": CHECKPOINTING[s["checkpointing"]],  # the planner's name
                "compile": "true" if s["compile"] else "false",
                "seq_len": str(s["seq_len"]),
                "micro_batch": str(s["micro_batch"]),
                "tokens_per_s": num(m.get("tokens_per_s")),
                "step_time_s": num(m.get("step_time_s")),
                "mfu": num(m.get("mfu")),
                "hfu": num(m.get("hfu")),
                "peak_allocated_gib": num(m.get("peak_allocated_bytes"), GIB),
                "peak_reserved_gib": num(m.get("peak_reserved_bytes"), GIB),
                "smi_used_gib": num(m.get("smi_used_max_bytes"), GIB),
                "predicted_tokens_per_s": num(p.get("tokens_per_s")),
                "predicted_allocated_gib": num(p.get("peak_allocated_bytes"), GIB),
            }
        )
    return out


def record(results_dir: Path, csv_path: Path = MEASURED_CSV) -> int:
    """Append a GPU run's measured rows to ``csv_path`` (once: rows already there are not repeated)."""
    doc = json.loads((results_dir / "results.json").read_text(encoding="utf-8"))
    if doc["environment"]["dry_run"]:
        raise ValueError(f"{results_dir}/results.json is a dry run: its figures are not GPU measurements")
    rows = csv_rows(doc)
    existing: set[tuple[str, ...]] = set()
    if csv_path.exists() and csv_path.stat().st_size:
        with csv_path.open(newline="", encoding="utf-8") as fh:
            existing = {(r["gpu"], r["date"], r["commit"], r["config"]) for r in csv.DictReader(fh)}
    new = [r for r in rows if (r["gpu"], r["date"], r["commit"], r["config"]) not in existing]
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    header = not csv_path.exists() or not csv_path.stat().st_size
    with csv_path.open("a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        if header:
            writer.writeheader()
        writer.writerows(new)
    return len(new)
