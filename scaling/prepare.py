"""Prepare a study's data: `python -m scaling.prepare [STUDY_DIR] [scaling.launch's study flags]
[--cache-dir DIR] [--workers N]` (also `aoscale prepare`).

Every (corpus, tokenizer, text field) the study's runs read is tokenised, both splits, with N
processes (`--workers`, default: the CPUs this process may use) into the token cache folder
(`jobs.data.prepare`; progress lines with tokens/s). Run it again and nothing is tokenised twice.
The study is an existing study directory (its runs' spec.json files), or the one the launcher's
flags describe (`--preset`, `--spec`, `--corpus`, `--tokenizer`, `--text-field`, ...).

The cache folder (`cache_folder`): `--cache-dir` (the study setting `cache_dir`), else the folder the
study recorded in `<study>/data.json` when it was launched or prepared, else `$AOSCALE_CACHE`,
else with `--backend slurm` or `ray` the folder `aoscale-cache` beside the study directory (on the
study's shared file system; never a home-directory cache a compute node may not see), else
`~/.cache/aoscale`.

The launcher's prepare stage (`stage`, `run_stage`): `scaling.launch` prepares before any run
starts. Locally it calls `prepare` in its own process; with `--backend slurm` it submits a CPU job
of its own (`--slurm-prepare-cpus`) that the run array depends on (`--dependency=afterok:<id>`);
with `--backend ray` a CPU task runs before the trials. Runs launched by Slurm or Ray carry
AOSCALE_REQUIRE_PREPARED=1 and AOSCALE_CACHE=<the cache folder>: they never download or tokenise,
and a run that finds its cache missing is refused in one line naming this command (exit 2,
nothing written). A local run may tokenise on first use (the laptop path needs no prepare step).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli import InputError, int_arg, parse, rules, run_main
from jobs.data import corpus as data
from jobs.data.prepare import EXIT_STOPPED, Stopped, default_workers, prepare, stopping

from scaling.run.prepare_stage import (Stage, cache_env, cache_folder,
                                       describe, record, stage, study_corpora)


def parser() -> argparse.ArgumentParser:
    """scaling.launch's flags (the study and its data), a STUDY_DIR and `--workers`."""
    from scaling import launch  # noqa: PLC0415 - the launcher's parser, its flags declared once

    p = launch.parser()
    p.prog, p.error_prefix = "python -m scaling.prepare", "prepare"
    p.description = "\n\n".join(__doc__.split("\n\n")[:3])  # what, which study, which cache folder
    p.add_argument("study", nargs="?", help="an existing study directory (its runs' corpora); without it, the study "
                   "the flags describe")
    p.add_argument("--workers", type=int_arg, help=f"tokenising processes (default: the CPUs this process may use, "
                   f"{default_workers()} here)")
    return p


def _study_stage(args: argparse.Namespace) -> tuple[Stage, Path]:
    """The stage of the existing study `args.study`, or of the study the flags describe."""
    from scaling import launch  # noqa: PLC0415
    from scaling.run import study_ledger  # noqa: PLC0415

    if args.study:
        study_dir = Path(args.study)
        document = study_ledger.read_study(study_dir)
        if document is None:
            raise InputError(f"study: {study_dir} holds no study.json; pass a study directory made by scaling.launch, "
                             "or the launcher's flags (--preset, --spec, --corpus, ...) without it")
        specs = [study_ledger.load_spec(study_dir, run_id) for run_id in document["order"]]
        setting = args.cache_dir or (document.get("settings") or {}).get("cache_dir")
        folder, source = cache_folder(setting, study_dir, args.backend)
        return Stage(folder, source, study_corpora(specs)), study_dir
    study = launch.study_from_args(args)
    study_dir = Path(args.study_dir) if args.study_dir else launch.STUDIES_ROOT / study.name
    return stage(study, study_dir, args.backend), study_dir


def _main(args: argparse.Namespace) -> int:
    if args.workers is not None:
        rules.positive_int("workers", args.workers)
    stage_, study_dir = _study_stage(args)
    if args.dry_run:
        print(describe(stage_, "local", workers=args.workers))
        return 0
    with cache_env(stage_.cache_dir):
        for item in stage_.corpora:  # every corpus's own checks first: bad input is refused before tokenising
            data.check_local_rows(item.corpus, item.text_field)
        try:
            with stopping():
                prepare(stage_.corpora, workers=args.workers)
        except ValueError as error:  # a corpus that does not open (jobs.data names the field)
            raise InputError(str(error).splitlines()[0]) from None
        except Stopped as stop:
            print(f"prepare: stopped by {stop}; whole shards are kept and no cache is marked complete; run the "
                  "same command again to finish", file=sys.stderr)
            return EXIT_STOPPED
    recorded = (study_dir / "study.json").is_file()
    if recorded:
        record(study_dir, stage_)
    print(f"prepared {len(stage_.corpora)} corpus cache(s) in {stage_.cache_dir}; "
          + ("the study recorded the folder: relaunch it as before" if recorded else
             f"launch with --cache-dir {stage_.cache_dir} (or the same AOSCALE_CACHE)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 2 on bad input (one line), 3 when a stop signal ended it."""
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    return run_main("prepare", lambda: _main(args))


if __name__ == "__main__":
    sys.exit(main())
