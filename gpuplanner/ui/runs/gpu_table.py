"""The Runs pane's per-GPU table: the latest sample of every GPU, metrics a GPU does not report labelled."""

from __future__ import annotations

from PySide6.QtGui import QBrush, QColor, QFont, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.history.gpu_metrics import MISSING, UTILISATION_NOTE
from gpuplanner.ui.runs.run_telemetry import GPU_TABLE_COLUMNS, GpuCell

HEADER_TIPS = {
    "util_pct": "NVML utilisation. " + UTILISATION_NOTE,
    "sm_active_pct": "SM activity (GPM): the share of SMs busy. Hopper and newer GPUs only",
    "tensor_active_pct": "Tensor activity (GPM): the share of time the tensor cores were busy. Hopper and newer only",
    "pcie_tx_mbps": "PCIe traffic out of the GPU",
    "pcie_rx_mbps": "PCIe traffic into the GPU (input batches, host offload)",
    "nvlink_tx_mbps": "NVLink traffic out of the GPU over all active links (gradients between GPUs)",
    "nvlink_rx_mbps": "NVLink traffic into the GPU over all active links",
    "sm_clock": "The SM clock and, in brackets, its share of the GPU's maximum: lower while the GPU is throttled",
    "throttle": "Why the clocks are held down now (NVML clock event reasons), e.g. power cap, thermal",
    "temp_c": "GPU temperature",
}
CAPTION = (
    f"“not reported”: {MISSING} (SM and tensor activity need GPM, on Hopper and newer; NVLink needs active"
    " NVLink links); “…”: waiting for the next sample."
)

ENDED = "Run ended: the last readings, greyed out (not live). "
SPACING = 2  # between the table and its note
ROWS_SHOWN = 8  # GPUs shown without scrolling, room allowing; more scroll inside the table


class GpuTable(QWidget):
    """A compact table (one row per GPU) and a caption; fed by :meth:`show_rows` from the text timer."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACING)
        self.table = QTableWidget(0, len(GPU_TABLE_COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(self.table.focusPolicy())
        self.table.setWordWrap(False)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setMinimumSectionSize(60)
        for column, (key, header) in enumerate(GPU_TABLE_COLUMNS):
            if key in ("sm_clock", "throttle"):  # "1755 MHz (89%)", "power cap": never cut
                self.table.horizontalHeader().setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
            item = QTableWidgetItem(header)
            item.setToolTip(HEADER_TIPS.get(key, ""))
            self.table.setHorizontalHeaderItem(column, item)
        self.caption = QLabel(CAPTION)
        self.caption.setWordWrap(True)
        self.caption.setStyleSheet("color: gray; font-size: 9pt")
        layout.addWidget(self.table)
        layout.addWidget(self.caption)
        self._rows: list[tuple[str, list[GpuCell]]] = []
        self._ended = False
        self._wanted = 0  # the height last asked of the splitter above
        self.room_above = 0  # what the widget above it in the splitter keeps when the table asks for rows
        # a horizontal scroll bar (narrow windows) takes a row's room: the heights count it
        self.table.horizontalScrollBar().rangeChanged.connect(lambda *_: self._fit_height())
        self._fit_height()

    def show_rows(self, rows: list[tuple[str, list[GpuCell]]], ended: bool = False) -> None:
        """Show one row per GPU (from :meth:`RunTelemetry.gpu_table`); unchanged rows are left alone. Once
        the run ``ended`` the last readings are greyed out and the caption says so (not a live 100 %)."""
        if rows == self._rows and ended == self._ended:
            return
        self._rows, self._ended = rows, ended
        self.caption.setText(ENDED + CAPTION if ended else CAPTION)
        self.table.setRowCount(len(rows))
        muted = QBrush(self.palette().color(QPalette.ColorRole.PlaceholderText))
        normal = QBrush(self.palette().color(QPalette.ColorRole.Text))
        italic = QFont(self.font())
        italic.setItalic(True)
        for r, (label, cells) in enumerate(rows):
            self.table.setVerticalHeaderItem(r, QTableWidgetItem(label))
            for c, cell in enumerate(cells):
                item = self.table.item(r, c)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(r, c, item)
                item.setText(cell.text)
                item.setToolTip(cell.tooltip)
                item.setForeground(muted if cell.state != "value" or ended else normal)
                item.setFont(italic if cell.state == "missing" else self.font())
                if (
                    not ended
                    and cell.state == "value"
                    and GPU_TABLE_COLUMNS[c][0] == "throttle"
                    and cell.text != "none"
                ):
                    item.setForeground(QBrush(QColor("#b35c00")))
        self._fit_height()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_height()  # the caption wraps on more or fewer lines

    def _fit_height(self) -> None:
        """At least two GPUs' rows (more scroll inside the table), at most all of them, each row whole
        beside a horizontal scroll bar; when the rows or the scroll bar change, the splitter above is asked
        for every GPU's row up to :data:`ROWS_SHOWN`, leaving the widget above :attr:`room_above`."""
        header = self.table.horizontalHeader().sizeHint().height()
        row = self.table.verticalHeader().defaultSectionSize()
        bar = self.table.horizontalScrollBar()
        frame = 2 * self.table.frameWidth() + 2 + (bar.sizeHint().height() if bar.maximum() > 0 else 0)
        rows = max(1, len(self._rows))
        self.table.setMinimumHeight(header + min(rows, 2) * row + frame)
        self.table.setMaximumHeight(header + rows * row + frame)
        lines = self.caption.heightForWidth(self.width()) if self.width() > 100 else -1
        caption = (lines if lines > 0 else 2 * self.caption.fontMetrics().lineSpacing()) + 6
        spacing = SPACING
        self.setMinimumHeight(self.table.minimumHeight() + caption + spacing)  # the note whole under the rows
        self.setMaximumHeight(self.table.maximumHeight() + caption + spacing)
        layout = self.layout()
        if layout is not None:  # the table's new height may not move the note down by itself (seen under X11)
            layout.invalidate()
            layout.activate()
        wanted = header + min(rows, ROWS_SHOWN) * row + frame + caption + spacing
        splitter = self.parentWidget()
        if wanted != self._wanted and isinstance(splitter, QSplitter) and self.isVisible():
            self._wanted = wanted
            sizes = splitter.sizes()
            mine = splitter.indexOf(self)
            total = sum(sizes)
            height = max(self.minimumHeight(), min(wanted, total - self.room_above))
            splitter.setSizes([height if i == mine else (total - height) for i in range(len(sizes))])

    def cell_text(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text() if item is not None else ""
