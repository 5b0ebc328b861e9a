"""The window as a new user meets it on the first day, at 1280x800 and 1024x700, into docs/screenshots/first-day/.

    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python tools/first_day_screenshots.py [--out DIR] [--theme dark]

A fresh data and settings folder (nothing seeded), then, in order:
- ``empty-history``: the History pane before any run;
- ``first-plan``: the Plan pane with the form as it opens (the example workload), computed;
- ``demo-10s`` and ``demo-60s``: the Runs pane 10 s and 60 s after "Try a demo run" (the real demo run
  of the bundled trainer on this machine, a simulated GPU where there is none; it has no price);
- ``unpriced-run``: the History pane's summary of that demo run (stopped after the 60 s shot), a run
  without a price;
- ``failed-host``: the Hosts pane after probing an SSH host that refuses the connection;
- ``plan-70b``: the Plan pane for a full fine-tune of Llama 3.1 70B.

Each is written as ``<name>.png`` (1280x800) and ``<name>-1024.png`` (1024x700), with ``--theme dark`` as
``<name>-dark.png`` and ``<name>-dark-1024.png``. The demo run takes real time: about a minute and a half.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
SIZES = (("", (1280, 800)), ("-1024", (1024, 700)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots" / "first-day"))
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    args = parser.parse_args(argv)
    theme = "" if args.theme == "light" else "-dark"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpuplanner-first-day-"))
    os.environ.update(
        GPUPLANNER_DATA_DIR=str(tmp / "data"),
        GPUPLANNER_CONFIG_DIR=str(tmp / "config"),
        XDG_CONFIG_HOME=str(tmp / "xdg"),
    )
    os.environ.pop("GPUPLANNER_DB", None)
    import runs_screenshots  # noqa: F401  (chooses the Qt platform: the X server when there is one)
    from PySide6.QtCore import QSettings
    from screenshots import grab, wait

    from gpuplanner.launch.hosts import Host, add_host
    from gpuplanner.ui.app import create_application, create_window

    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp / "settings"))
    app = create_application((), theme=args.theme)
    window = create_window()
    window.resize(*SIZES[0][1])
    window.show()

    def shoot(name: str) -> None:
        for suffix, size in SIZES:
            window.resize(*size)
            wait(0.4)
            grab(window, out / f"{name}{theme}{suffix}.png")
        window.resize(*SIZES[0][1])

    try:
        wait(20, lambda: window.is_built("Runs"))
        plan, history, runs, hosts = window.plan_pane, window.history_pane, window.runs_pane, window.hosts_pane
        window.show_place("History")
        wait(20, lambda: not history.is_loading())
        shoot("empty-history")
        window.show_place("Plan")
        wait(20, lambda: not plan.is_busy() and plan.result is not None)
        shoot("first-plan")
        window.show_place("Runs")
        runs.start_demo_run()
        started = time.monotonic()
        wait(30, lambda: bool(runs.runs))
        for at in (10, 60):
            wait(max(0.0, started + at - time.monotonic()))
            shoot(f"demo-{at}s")
        entry = runs.current()
        runs._on_stop_clicked()
        wait(60, lambda: entry is not None and entry.state not in ("running", "starting", "stopping"))
        window.show_place("History")
        wait(5)
        wait(20, lambda: not history.is_loading())
        if entry is not None:
            history.select_runs([entry.run_id])
            wait(20, lambda: not history.is_loading())
            history.detail_tabs.setCurrentWidget(history.summary_view)
        shoot("unpriced-run")
        from gpuplanner.ui.services import AppServices

        db = AppServices.from_environment().db_path
        add_host(db, Host(name="gpu-box", kind="ssh", hostname="127.0.0.1", port=9, user="me"))
        window.show_place("Hosts")
        hosts.reload()
        wait(2)
        hosts.probe("gpu-box")
        wait(30, lambda: "no:" in str(hosts.model.reachable_text(hosts.model.host(hosts.model.row_of("gpu-box")))))
        shoot("failed-host")
        window.show_place("Plan")
        plan.form.set_values({"model": "llama-3.1-70b", "method": "full"})
        plan.recalculate()
        wait(20, lambda: not plan.is_busy() and plan.result is not None)
        shoot("plan-70b")
    finally:
        window.shutdown(stop_runs=True)
        window._closing_done = True
        window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
