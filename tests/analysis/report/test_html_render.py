"""The self-contained report.html renders in headless Chromium and shows its figures; its first
screen holds the summary (answer and warnings boxes) and the first figure."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from analysis import fit_curves
from analysis.report.figures import family_colour
from analysis.report.render import ANSWER_BG, WARNINGS_BG
from tests.analysis import synth

CHROMIUM = Path("/usr/bin/chromium")
FAMILY_COLOURS = [np.array(family_colour(f)[:3]) for f in ("ar", "aogpt")]  # drawn only by the figures
FIRST_SCREEN = (1200, 900)  # a laptop browser window, in CSS pixels


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255


def _pixels_of(pixels: np.ndarray, colour: np.ndarray) -> int:
    return int((np.abs(pixels - colour) < 0.02).all(axis=-1).sum())


def _curve_pixels(pixels: np.ndarray) -> np.ndarray:
    """Where a family's curve colour is painted."""
    return np.any([(np.abs(pixels - c) < 0.04).all(axis=-1) for c in FAMILY_COLOURS], axis=0)


def _screenshot(tmp_path, html: Path, size: tuple[int, int], name: str) -> np.ndarray:
    shot = tmp_path / name
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={size[0]},{size[1]}",
           "--hide-scrollbars", f"--screenshot={shot}", html.as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    return mpimg.imread(shot)[..., :3]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_report_html_renders_with_figures(tmp_path):
    sizes = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M")}
    study = synth.write_study(tmp_path / "study", synth.records(families=("ar", "aogpt"), sizes=sizes))
    html = fit_curves.run([study], tmp_path / "report", bootstrap=20) / "report.html"
    pixels = _screenshot(tmp_path, html, (1200, 12000), "page.png")
    blue = _curve_pixels(pixels)
    assert blue.sum() > 200  # the embedded PNGs were decoded and painted
    assert pixels.std() > 0.05  # not a blank page
    first = _screenshot(tmp_path, html, FIRST_SCREEN, "first_screen.png")
    assert _pixels_of(first, _rgb(ANSWER_BG)) > 5000  # the summary's answer box
    assert _pixels_of(first, _rgb(WARNINGS_BG)) > 1000  # its warnings box
    rows = np.flatnonzero(_curve_pixels(first).any(axis=1))
    assert rows.size and rows.max() - rows.min() > 150  # the first figure's curves, not just a strip of it
