"""The results book's section writer, on the laptop preset's first reference report (real fits.json and tables)."""
from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from reference import review_book

LAPTOP = Path(__file__).resolve().parents[2] / "docs" / "results" / "laptop" / "first-1024-windows"  # a fixed report
RUN = {"command": "python -m scaling.launch --preset dec-enc-cpu", "wall_s": 600.0, "rc": 0,
       "load_before": (1.0, 1.0, 1.0), "load_after": (2.0, 2.0, 2.0), "tail": ""}


def test_a_section_quotes_the_reports_numbers_with_intervals_and_n():
    text = review_book.section_md("dec-enc-cpu", RUN, LAPTOP)
    assert "**Wall time.** 10.0 min" in text and "`python -m scaling.launch --preset dec-enc-cpu`" in text
    # AO-GPT 0.1M's any-order NLL in the laptop points table: 2.779 [2.691, 2.867] over 3 seeds
    assert "2.779 [2.691, 2.867] (n=3)" in text
    assert "**Ensemble gain**" in text and "**What this cannot say.**" in text
    assert "| aogpt | adaln+mix:0.1 | 0.3M | 1 → 4 | +0.0059 [+0.0010, +0.0109] | 3 |" in text
    assert "Runs on the unigram plateau** (0" in text


def test_every_section_names_a_cpu_preset_and_unknown_presets_exit_2():
    from scaling.study.review_presets import CPU_PRESETS

    assert set(review_book.SECTIONS) == set(CPU_PRESETS)  # the de-confounding designs included
    with pytest.raises(SystemExit) as exit_info:
        review_book.parse(["--presets", "nope"])
    assert exit_info.value.code == 2


def test_the_ema_sections_quote_the_ema_minus_raw_table(tmp_path):
    import polars as pl

    tables = tmp_path / "tables"
    tables.mkdir()
    pl.DataFrame({"family": ["aogpt"], "variant": ["adaln+ema0.99+mix:0.1"], "size": ["0.1M"],
                  "dataset": ["shakespeare"], "split": ["validation"], "metric": ["nll_anyorder"], "mean": [-0.012],
                  "std": [0.004], "n": [3], "se": [0.0023], "lo": [-0.022], "hi": [-0.002]}
                 ).write_csv(tables / "ema_effect.csv")
    text = review_book.ema_md(tables / "ema_effect.csv")
    assert "-0.012 [-0.022, -0.002] (n=3)" in text and "adaln+ema0.99+mix:0.1" in text
    assert review_book.SECTIONS["ema-cpu"].ema_effect and review_book.SECTIONS["factorial-cpu"].ema_effect
    assert "no run scored both" in review_book.ema_md(tmp_path / "missing.csv")


def test_sections_only_rewrites_a_section_as_a_script_from_any_folder(tmp_path):
    """`--sections-only` trains nothing: it reads the study's report and the launch's book_run.json.
    Run as a plain script from another folder with no PYTHONPATH (the book's own command line),
    so the section writer's imports must resolve from the script alone."""
    import json
    import os
    import shutil
    import subprocess
    study = tmp_path / "studies" / "dec-enc-cpu"
    shutil.copytree(LAPTOP, study / "report")
    (study / review_book.RUN_FILE).write_text(json.dumps({k: v for k, v in RUN.items() if k != "tail"}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = Path(review_book.__file__).resolve()
    proc = subprocess.run([sys.executable, str(script), "--sections-only", "--presets", "dec-enc-cpu",
                           "--studies-root", str(tmp_path / "studies"), "--out", str(tmp_path / "book")],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2.779 [2.691, 2.867] (n=3)" in (tmp_path / "book" / "dec-enc-cpu.md").read_text()
    # the book's index table: every written section's verdict contrasts, one row each
    verdicts = pl.read_csv(tmp_path / "book" / "verdicts.csv")
    assert verdicts.equals(pl.read_csv(tmp_path / "book" / "dec-enc-cpu.contrasts.csv"))
    assert verdicts["preset"].to_list() == ["dec-enc-cpu"] * len(review_book.VERDICTS["dec-enc-cpu"].contrasts)
    (study / review_book.RUN_FILE).unlink()
    proc = subprocess.run([sys.executable, str(script), "--sections-only", "--presets", "dec-enc-cpu",
                           "--studies-root", str(tmp_path / "studies"), "--out", str(tmp_path / "book2")],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and not (tmp_path / "book2").exists()  # refused, nothing written
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("--sections-only:") and review_book.RUN_FILE in line and "run that study first" in line


DAMAGED_FITS = {  # what the report's fits.json holds -> what the one line names (cli.schema.FITS)
    "ensemble_m_str": (lambda d: d["ensemble"][0]["gains"][0].update(m_min="two"),
                       "fits.json: ensemble[0].gains[0].m_min: 'two' must be"),
    "ensemble_no_gains": (lambda d: d["ensemble"][0].pop("gains"), "fits.json: ensemble[0].gains is missing"),
    "plateau_int": (lambda d: d.update(plateau_runs=5), "fits.json: plateau_runs: 5 must be a list"),
    "arm_weights_str": (lambda d: d.update(arm_weights=["ema"]), "fits.json: arm_weights[0]: 'ema' must be an object"),
    "weights_null": (lambda d: d.update(weights=None), "fits.json: weights: None"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_FITS))
def test_sections_only_refuses_a_damaged_fits_json_in_one_line_naming_the_key_and_writes_no_book(tmp_path, case):
    """The book reads fits.json through cli.schema.FITS before it writes anything: exit 2, one
    line naming the file, the key and the fix, no --out (a real process on a copied report)."""
    import json
    import shutil
    import subprocess
    study = tmp_path / "studies" / "dec-enc-cpu"
    shutil.copytree(LAPTOP, study / "report")
    (study / review_book.RUN_FILE).write_text(json.dumps({k: v for k, v in RUN.items() if k != "tail"}))
    fits = json.loads((study / "report" / "fits.json").read_text())
    damage, named = DAMAGED_FITS[case]
    damage(fits)
    (study / "report" / "fits.json").write_text(json.dumps(fits))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = subprocess.run([sys.executable, str(Path(review_book.__file__).resolve()), "--sections-only", "--presets",
                           "dec-enc-cpu", "--studies-root", "studies", "--out", "book"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert named in line and "rebuild the report" in line, line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_generation_rows_are_labelled_by_condition_and_the_parallel_error_is_quoted(tmp_path):
    import polars as pl

    points = pl.DataFrame({"family": ["aogpt", "aogpt"], "variant": ["v", "v"], "size": ["0.1M", "0.1M"],
                           "dataset": ["generated"] * 2, "split": ["samples"] * 2, "metric": ["gen_self_nll"] * 2,
                           "m": [None, None], "steps": [32, 8], "tokens_per_step": [1, 4],
                           "temperature": [1.0, 0.7], "top_p": [1.0, 0.95], "mean": [2.7, 2.9], "std": [0.1, 0.1],
                           "n": [3, 3], "se": [0.06, 0.06], "lo": [2.45, 2.65], "hi": [2.95, 3.15]},
                          schema_overrides={"m": pl.Int64})
    text = review_book.points_table(points, ("gen_self_nll",))
    assert "| gen_self_nll | generated | 1 token/step (32 steps) plain | aogpt | v | 2.700 [2.450, 2.950] (n=3) |" in text
    assert "| 4 tokens/step (8 steps) annealed T=0.7 p=0.95 |" in text
    pl.DataFrame({"family": ["aogpt"], "variant": ["v"], "size": ["0.1M"], "temperature": [0.7], "top_p": [0.95],
                  "tokens_per_step": [4], "steps": [8], "mean": [0.0937], "std": [0.02], "n": [3], "se": [0.0143],
                  "lo": [0.0323], "hi": [0.1551]}).write_csv(tmp_path / "parallel_decoding.csv")
    table = review_book.parallel_md(tmp_path / "parallel_decoding.csv")
    assert "| aogpt | v | 0.1M | annealed T=0.7 p=0.95 | 4 (8) | +0.0937 [+0.0323, +0.1551] (n=3) |" in table
    assert review_book.parallel_md(tmp_path / "absent.csv") == "" and review_book.repeats_md(tmp_path / "absent.csv") == ""


def test_every_section_carries_a_verdict_and_the_confounded_ones_stay_open():
    assert set(review_book.VERDICTS) == set(review_book.SECTIONS)
    assert all(v.word in review_book.VERDICT_WORDS and v.confounds for v in review_book.VERDICTS.values())
    for preset in ("pe-cpu", "factorial-cpu", "ema-cpu"):  # one shared lr, or 0.999 = 0.9999 by construction
        assert review_book.VERDICTS[preset].word == "open"
    text = review_book.section_md("dec-enc-cpu", RUN, LAPTOP)
    assert text.index("**Verdict: open.**") < text.index("**Confounds it does not remove.**") < text.index("**Command.**")
    assert "numerics path: not recorded (made before runs recorded it)" in text
    assert "numerics path: cpu AVX2" in review_book.section_md("dec-enc-cpu", {**RUN, "numerics": "cpu AVX2"}, LAPTOP)


def test_a_contrast_is_welchs_interval_from_the_two_arms_seed_intervals():
    import polars as pl
    from scipy import stats

    t2 = stats.t.ppf(0.975, 2)
    points = pl.DataFrame({"metric": ["m", "m"], "size": ["s", "s"], "family": ["a", "b"], "variant": ["x", "y"],
                           "mean": [1.0, 0.5], "lo": [1.0 - t2 * 0.1, 0.5 - t2 * 0.1],
                           "hi": [1.0 + t2 * 0.1, 0.5 + t2 * 0.1], "n": [3, 3]})
    diff, lo, hi, dof = review_book.welch(points, review_book.Contrast("m", "s", "a/x", "b/y"))
    half = stats.t.ppf(0.975, 4) * (0.02 ** 0.5)  # equal se 0.1 and n 3: dof 4
    assert (diff, dof) == (pytest.approx(0.5), pytest.approx(4.0))
    assert (lo, hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert review_book.welch(points, review_book.Contrast("m", "s", "a/x", "c/z")) is None


def test_a_contrast_is_paired_by_seed_where_the_report_has_per_run_values():
    import polars as pl

    text = review_book.section_md("dec-enc-cpu", RUN, LAPTOP)  # the laptop report ships tables/plateau.csv
    # MDLM − AO-GPT nll_l2r at 3/80/2: the two gaps to AR, 0.639 and 0.488, differ by 0.151 over the same seeds
    assert "mdm/mdlm − aogpt/adaln+mix:0.1, nll_l2r at 3/80/2: +0.151 [" in text and "(paired by seed, n = 3)" in text
    points = pl.read_csv(LAPTOP / "tables" / "points.csv")
    plateau = pl.read_csv(LAPTOP / "tables" / "plateau.csv")
    contrast = review_book.Contrast("nll_l2r", "3/80/2", "mdm/mdlm", "aogpt/adaln+mix:0.1")
    swept = pl.concat([plateau, plateau.with_columns(run_id=pl.lit("other-lr"))])  # two candidates per seed
    assert review_book.paired(points, plateau, contrast) is not None
    assert review_book.paired(points, swept, contrast) is None  # which candidate was chosen is not in the table
    assert "(Welch, " in review_book.verdict_md("dec-enc-cpu", points, swept)


def test_a_trained_studys_section_names_the_numerics_paths_its_runs_recorded(tmp_path):
    from jobs.run import numerics
    ar = numerics.NumericsPath("cpu", "AVX2", "2.13.0", numerics.NOT_USED, 1, "fp32", False)
    ao = numerics.NumericsPath("cpu", "AVX2", "2.13.0", "a56449e26daa70e1", 1, "fp32", False)
    for run_id, path in (("r0", ar), ("r1", ao), ("r2", ao)):
        (tmp_path / "runs" / run_id).mkdir(parents=True)
        numerics.record_segment(tmp_path / "runs" / run_id, 0, path)
    assert review_book.numerics_text(tmp_path) == (f"{ar.id} ({ar.label}; 1 run); {ao.id} ({ao.label}; 2 runs)")
    assert review_book.numerics_text(tmp_path / "nowhere") is None


REVIEW = LAPTOP.parents[1] / "review"
SHIPPED = sorted(p.parent.name for p in REVIEW.glob("*/book_run.json"))


def test_every_section_of_the_book_ships_its_study_and_the_index_table_is_theirs():
    assert SHIPPED == sorted(review_book.SECTIONS)
    lines = (REVIEW / "tables" / "verdicts.csv").read_text().splitlines()
    shipped = [(REVIEW / p / "tables" / "verdict_contrasts.csv").read_text().splitlines() for p in review_book.SECTIONS]
    assert all(rows[0] == lines[0] for rows in shipped)  # one header
    assert lines[1:] == [row for rows in shipped for row in rows[1:]]  # every section's rows, in the book's order


@pytest.mark.parametrize("preset", SHIPPED)
def test_the_shipped_contrast_table_holds_the_sections_contrasts_paired_where_the_tables_allow(preset):
    folder = REVIEW / preset
    table = review_book.contrast_table(preset, folder)
    assert table.equals(pl.read_csv(folder / "tables" / "verdict_contrasts.csv"))
    assert table.height == len(review_book.VERDICTS[preset].contrasts)
    text = (folder / "README.md").read_text()
    for row in table.to_dicts():
        shown = f"{row['mean']:+.3f} [{row['lo']:+.3f}, {row['hi']:+.3f}]"
        assert (f"{shown} (paired by seed, n = {row['n']})" if row["pairing"] == "seed" else f"{shown} (Welch, ") in text
        # a contrast on a metric the per-run table holds is paired (every section's runs share seeds)
        if row["metric"] in ("nll_l2r", "nll_anyorder"):
            assert row["pairing"] == "seed" and row["n"] == 3
    word = "open" if any(r["pairing"] != "seed" or r["lo"] <= 0 <= r["hi"] for r in table.to_dicts()) \
        else review_book.VERDICTS[preset].word
    assert text.count(f"**Verdict: {word}.**") == 1


def test_a_declared_contradicts_falls_back_to_open_when_the_paired_interval_holds_zero():
    folder = LAPTOP.parents[1] / "review" / "ema-long-cpu"
    points = pl.read_csv(folder / "tables" / "points.csv")
    plateau = pl.read_csv(folder / "tables" / "plateau.csv")
    assert review_book.verdict_md("ema-long-cpu", points, plateau).startswith("**Verdict: contradicts.**")
    arm = pl.col("variant") == "adaln+ema0.9999+mix:0.1"
    noisy = plateau.with_columns(pl.when(arm & (pl.col("seed") == 0)).then(pl.col("value") - 0.5)
                                 .otherwise(pl.col("value")).alias("value"))  # one seed now favours 0.9999
    text = review_book.verdict_md("ema-long-cpu", points, noisy)
    assert text.startswith("**Verdict: open.**") and "needs a paired interval that excludes 0" in text


@pytest.mark.parametrize("argv, named", [
    (["--out", ""], "--out: empty path"), (["--out", "."], "is the current folder"),
    (["--bootstrap", "x"], "--bootstrap: 'x' is not a whole number"), (["--bootstrap", "3"], "--bootstrap: 3"),
    (["--max-steps", "0"], "--max-steps: 0"), (["--seeds", "abc"], "--seeds: 'abc'"), (["--sizes", ","], "--sizes: empty")])
def test_the_books_flags_are_refused_in_one_line_before_it_writes(tmp_path, monkeypatch, capsys, argv, named):
    """issue 49 item 5: exit 2, one line, nothing written (the out folder is not created)."""
    monkeypatch.chdir(tmp_path)
    assert review_book.main(["--presets", "pe-cpu", "--studies-root", "sr", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert list(tmp_path.iterdir()) == []
