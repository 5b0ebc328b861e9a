"""The window's log file: what went wrong on any thread, kept with its traceback (no Qt here).

While the window runs, :func:`install` sends the ``gpuplanner`` loggers (INFO and up: the launcher's
watcher threads, the window's background jobs, the history) to a rotating file,
``<data folder>/logs/gpuplanner.log`` (1 MB, then ``gpuplanner.log.1`` ... ``.3``), and replaces
``threading.excepthook`` so an exception that ends any thread is written there too before the previous
hook sees it. ``Help > Show log`` shows the file; ``crash_report`` appends the exceptions of the GUI
thread to the same file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path

from gpuplanner import __version__
from gpuplanner.paths import data_dir

LOGGER = "gpuplanner"
MAX_BYTES = 1_000_000
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"

ThreadHook = Callable[[threading.ExceptHookArgs], object]


def log_path() -> Path:
    """The log file of the data folder in use (``$GPUPLANNER_DATA_DIR``, else the platform's)."""
    return data_dir() / "logs" / "gpuplanner.log"


@dataclass
class AppLog:
    """An installed log: its file, its handler and the thread hook it replaced (``remove`` undoes it)."""

    path: Path
    handler: RotatingFileHandler
    previous_thread_hook: ThreadHook
    previous_level: int

    def remove(self) -> None:
        logger = logging.getLogger(LOGGER)
        logger.removeHandler(self.handler)
        logger.setLevel(self.previous_level)
        self.handler.close()
        threading.excepthook = self.previous_thread_hook


def install(path: Path | None = None) -> AppLog:
    """Log the ``gpuplanner`` loggers and uncaught thread exceptions to ``path`` (default :func:`log_path`)."""
    path = path or log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger(LOGGER)
    previous_level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    previous_hook = threading.excepthook

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread is not None else "a thread"
            error = args.exc_value if args.exc_value is not None else args.exc_type()
            logging.getLogger(f"{LOGGER}.threads").error(
                "uncaught exception in %s", name, exc_info=(args.exc_type, error, args.exc_traceback)
            )
        previous_hook(args)

    threading.excepthook = thread_hook
    logger.info("gpuplanner %s: the window started; this log is %s", __version__, path)
    return AppLog(path, handler, previous_hook, previous_level)


def read_tail(path: Path, limit: int = 2_000_000) -> str:
    """The last ``limit`` characters of the log (all of it, as it is capped at 1 MB); "" when there is none."""
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - limit))
            return log.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
