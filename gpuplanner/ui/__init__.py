"""The PySide6 + pyqtgraph desktop window: the only package that imports Qt."""
