"""Start the desktop application: ``gpuplanner`` with no subcommand (or ``python -m gpuplanner``).

``main(argv)`` creates the QApplication (Fusion style, a palette that follows the system's light or
dark scheme, the SVG app icon), the services (history database, catalog) and the main window, and
runs the event loop. Options: ``--db FILE`` (history database), ``--theme light|dark`` (instead of
following the system).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from gpuplanner.app.fast_start import import_history_without_pandas
from gpuplanner.ui import app_log, crash_report, xcb_check
from gpuplanner.ui.gui_gc import GuiThreadCollector
from gpuplanner.ui.palette import SchemeFollower, app_icon


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuplanner", description="GPU Planner desktop application")
    parser.add_argument(
        "--db", metavar="FILE", help="history database (default: $GPUPLANNER_DB or the data directory's)"
    )
    parser.add_argument("--theme", choices=("light", "dark"), help="force a palette instead of following the system")
    args, _qt_args = parser.parse_known_args(list(argv))
    return args


def create_application(argv: Sequence[str] = (), theme: str | None = None) -> QApplication:
    """The QApplication with the app's names, icon, style and palette (reuses an existing one)."""
    QCoreApplication.setOrganizationName("GPU Planner")
    QCoreApplication.setApplicationName("gpuplanner")
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication(["gpuplanner", *argv])
    app.setApplicationDisplayName("GPU Planner")
    app.setDesktopFileName(
        "io.github.gpuplanner.GpuPlanner"
    )  # packaging/linux/<id>.desktop: Wayland finds the icon by it
    app.setWindowIcon(app_icon())
    SchemeFollower(app, forced=theme)
    return app


def create_window(db: str | None = None):  # -> MainWindow (imported lazily: keeps `--help` fast)
    import_history_without_pandas()  # before anything imports the history: see gpuplanner.app.fast_start
    from gpuplanner.ui.main_window import MainWindow
    from gpuplanner.ui.services import AppServices

    return MainWindow(AppServices.from_environment(db))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problem = xcb_check.check()
    if problem is not None:  # say what to install instead of letting Qt abort the process
        print(problem, file=sys.stderr)
        return 1
    app = create_application((), theme=args.theme)
    try:  # the loggers and any thread's uncaught exception go to the log file (Help > Show log)
        log: app_log.AppLog | None = app_log.install()
    except OSError as exc:  # a data folder that cannot be written does not stop the window
        print(f"gpuplanner: no log file: {exc}", file=sys.stderr)
        log = None
    crash_report.install()  # an exception in a slot is logged and shown, not lost in a terminal
    collector = GuiThreadCollector(app)  # cycles are collected on this thread, never on a worker's
    collector.start()
    try:
        window = create_window(args.db)
        window.show()
        return int(app.exec())
    finally:
        collector.stop()
        if log is not None:
            log.remove()


if __name__ == "__main__":
    raise SystemExit(main())
