"""Read a PDF back the way a person sees it: poppler's word boxes (pdftotext -bbox-layout) and page images.

Used by the report tests to check that no two words overlap, that every word lies inside the page's
margins, and that the text put in is all there (nothing clipped or elided).
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

NS = "{http://www.w3.org/1999/xhtml}"


@dataclass(frozen=True)
class Word:
    page: int
    text: str
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass
class PdfPages:
    sizes: list[tuple[float, float]]
    words: list[Word]

    def texts(self, page: int | None = None) -> list[str]:
        return [w.text for w in self.words if page is None or w.page == page]


def read_words(path: Path) -> PdfPages:
    out = subprocess.run(
        ["pdftotext", "-bbox-layout", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout
    root = ET.fromstring(out)
    sizes, words = [], []
    for number, page in enumerate(root.iter(f"{NS}page")):
        sizes.append((float(page.get("width", 0)), float(page.get("height", 0))))
        for word in page.iter(f"{NS}word"):
            box = [float(word.get(k, 0)) for k in ("xMin", "yMin", "xMax", "yMax")]
            words.append(Word(number, unicodedata.normalize("NFKC", word.text or ""), *box))  # "ﬁ" ligatures
    return PdfPages(sizes, words)


def overlaps(pages: PdfPages, tolerance: float = 0.5) -> list[tuple[Word, Word]]:
    """Pairs of words on one page whose boxes intersect by more than ``tolerance`` points both ways."""
    found = []
    by_page: dict[int, list[Word]] = {}
    for word in pages.words:
        by_page.setdefault(word.page, []).append(word)
    for words in by_page.values():
        words.sort(key=lambda w: w.y0)
        for i, a in enumerate(words):
            for b in words[i + 1 :]:
                if b.y0 >= a.y1 - tolerance:
                    break
                dx = min(a.x1, b.x1) - max(a.x0, b.x0)
                dy = min(a.y1, b.y1) - max(a.y0, b.y0)
                if dx > tolerance and dy > tolerance:
                    found.append((a, b))
    return found


def outside(pages: PdfPages, margin_pt: float) -> list[Word]:
    """Words that reach into the page's margin (clipped or drawn off the printable area)."""
    bad = []
    for word in pages.words:
        width, height = pages.sizes[word.page]
        m = margin_pt - 1.0
        if word.x0 < m or word.y0 < m or word.x1 > width - m or word.y1 > height - m:
            bad.append(word)
    return bad


def _tokens(text: str) -> list[str]:
    """Words split at spaces and after hyphens (a line may break after "fine-", before "tune")."""
    return [part for word in text.split() for part in re.split(r"(?<=-)", word) if part]


def missing_words(pages: PdfPages, texts: list[str]) -> Counter:
    """Words of ``texts`` that the PDF does not contain as often as they were put in (clipped, elided)."""
    wanted = Counter(token for text in texts for token in _tokens(text))
    return wanted - Counter(token for word in pages.texts() for token in _tokens(word))


def render_pngs(path: Path, out_dir: Path, dpi: int = 60) -> list[Path]:
    """Each page as a PNG (pdftoppm), as a person opening the PDF sees it."""
    subprocess.run(["pdftoppm", "-r", str(dpi), "-png", str(path), str(out_dir / "page")], check=True)
    return sorted(out_dir.glob("page*.png"))


def page_lines(path: Path) -> list[list[str]]:
    """Each page's lines as ``pdftotext -layout`` reads them, blank lines and the footer left out."""
    out = subprocess.run(["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True).stdout
    pages = unicodedata.normalize("NFKC", out).split("\f")[:-1]
    footer = re.compile(r"page \d+ of \d+$")
    return [[line.strip() for line in page.splitlines() if line.strip() and not footer.search(line)] for page in pages]


def image_pages(path: Path) -> list[int]:
    """The page (0-based) of each image in the PDF, in order (``pdfimages -list``)."""
    out = subprocess.run(["pdfimages", "-list", str(path)], check=True, capture_output=True, text=True).stdout
    return [int(line.split()[0]) - 1 for line in out.splitlines()[2:] if line.strip()]
