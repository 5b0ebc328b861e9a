"""The run history: a local SQLite store (sqlite-utils) of runs, telemetry, saved plans and calibration.

No Qt here. Entry points: :func:`open_db`, :class:`Ingestor` / :func:`ingest_file`, :func:`summarize`,
:func:`calibration.measurements`, :mod:`plans`, :mod:`maintenance`, :mod:`export`.
"""

from gpuplanner.history.db import HistoryError, open_db, resolve_db_path
from gpuplanner.history.ingest import Ingestor, ingest_records, stream_position

__all__ = ["HistoryError", "Ingestor", "ingest_records", "open_db", "resolve_db_path", "stream_position"]
