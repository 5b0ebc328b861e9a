"""What every pane of the window shares: where the history lives and the GPU catalog.

Panes receive one :class:`AppServices` in their constructor (``Pane(services, parent=None)``)
instead of reaching for globals, so tests can point a whole window at a temporary database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuplanner.history.alert_rules import AlertSettings
from gpuplanner.history.db import resolve_db_path
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import Catalog, load_catalog


@dataclass
class AppServices:
    db_path: Path
    config_dir: Path
    _catalog: Catalog | None = field(default=None, repr=False)
    alert_settings: AlertSettings = field(default_factory=AlertSettings)  # Runs and History evaluate under these

    @classmethod
    def from_environment(cls, db: str | None = None) -> AppServices:
        """The user's own database (``--db``, ``$GPUPLANNER_DB`` or the data directory) and settings."""
        return cls(db_path=resolve_db_path(db), config_dir=config_dir())

    @property
    def catalog(self) -> Catalog:
        """The GPU and price catalog with the user's overrides, loaded on first use."""
        if self._catalog is None:
            self._catalog = load_catalog(self.config_dir)
        return self._catalog

    def reload_catalog(self) -> Catalog:
        self._catalog = None
        return self.catalog
