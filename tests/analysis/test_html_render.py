"""The self-contained report.html renders in headless Chromium and shows its figures."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from analysis import fit_curves
from tests.analysis import synth

CHROMIUM = Path("/usr/bin/chromium")
MPL_BLUE = np.array([31, 119, 180]) / 255  # matplotlib's first colour (C0), only drawn by the figures


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_report_html_renders_with_figures(tmp_path):
    sizes = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M")}
    study = synth.write_study(tmp_path / "study", synth.records(families=("ar", "aogpt"), sizes=sizes))
    report = fit_curves.run([study], tmp_path / "report", bootstrap=20)
    shot = tmp_path / "shot.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,12000",
           f"--screenshot={shot}", (report / "report.html").as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = mpimg.imread(shot)[..., :3]
    blue = (np.abs(pixels - MPL_BLUE) < 0.04).all(axis=-1)
    assert blue.sum() > 200  # the embedded PNGs were decoded and painted
    assert pixels.std() > 0.05  # not a blank page
