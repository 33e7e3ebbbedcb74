"""`python -m scaling.status <study>`: runs by state with progress, loss and ETA.

`learned` says whether an evaluated run is below its data's unigram baseline (`ok`) or still on the
plateau (`plateau`: its numbers are not a result; see the report's under-training check).
A study submitted to Slurm gets a `queue` column: the scheduler's state of each run's job
(PENDING, RUNNING, COMPLETED, ...; `UNKNOWN` when Slurm cannot be asked, `-` for a run never
submitted) beside the ledger state.

State `trained`: training is done but the records are not the run's result yet (not evaluated,
an unreadable eval.parquet, partial, or of another suite); relaunching the study evaluates it.
The `files` column says what is damaged (`ok` otherwise): `ckpt-missing` (no checkpoint left),
`ckpt-corrupt` (the final one fails its checksum), `eval-unreadable` (a truncated eval.parquet),
`eval-schema` (an eval.parquet whose columns break cli.schema: a string `value`).
Each damaged or failed run also gets a `warning:` line under the table saying how to repair or
retry it (`--retry-failed`), as does a run the table cannot show as it should (its folder or
spec.json missing or corrupt, a status.json rebuilt from its checkpoints).

A relaunch a kill interrupted (its `relaunch.json` journal, scaling.run.journal) is reported, not
finished (status writes nothing): a `relaunch:` line says whether study.json holds the new study
yet, which runs' spec.json are still to write and which runs it adds; the runs are shown with the
specs it gives them, and the next launch of the study finishes it. A damaged journal is refused.

`--json` prints one JSON object instead: `{"study", "runs": [{column: value, "warnings": [...]}],
"counts": {state: n}, "relaunch": null or {"study_written", "specs_left", "runs_added"}}` (seed,
loss and tries as numbers, unknown values as null), for scripts and dashboards; the warnings go to
stderr as well.

Exit status: 0 when every run is done, 1 otherwise, 2 when the path holds no study.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from analysis.records.carry import study_note
from analysis.compare.fairness import plateau_table
from cli import InputError, Parser, numerics_ids, parse, run_main, schema
from jobs.train import checkpoint as ckpt
from jobs.executors.slurm import queue_states
from jobs.data.ledger import coverage_columns, train_tokens
from jobs.eval.state import read_stamp
from jobs.eval.records import EVAL_FILE, read_records
from jobs.run import numerics
from jobs.run.files import METRICS_FILE, read_status
from jobs.run.spec import RunSpec

from .run import journal, study_ledger

TAIL_BYTES = 65_536  # enough for the last few dozen metric rows
VERIFY_MAX_BYTES = 1 << 30  # final checkpoints up to 1 GiB are checksummed every time (--verify: all)
COLUMNS = ("run_id", "family", "variant", "size", "seed", "state", "progress", "loss", "eta", "tries", "learned",
           "files", "numerics")
QUEUE_COLUMN = "queue"


def last_train_row(run_dir: Path) -> dict[str, Any] | None:
    """The newest `kind="train"` row of metrics.ndjson, reading only the file's tail; a row that
    breaks `cli.schema.METRICS_ROW` on the way is refused (InputError naming the line and key)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
        lines = handle.read().decode("utf-8", errors="replace").splitlines()
    for back, line in enumerate(reversed(lines)):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        where = f"{path} line {len(lines) - back}" + (" of its tail" if path.stat().st_size > TAIL_BYTES else "")
        if schema.METRICS_ROW.check(where, row).get("kind") == "train":
            return row
    return None


def eta_s(run: study_ledger.RunView, step_tokens: int, row: dict[str, Any] | None) -> float | None:
    """Seconds left at the last logged throughput (None when unknown or finished)."""
    if row is None or run.state in ("done", "trained", "failed") or not row.get("tokens_per_s"):
        return None
    return max(0, run.steps - run.step) * step_tokens / float(row["tokens_per_s"])


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s"


def _spec(study_dir: Path, run_id: str) -> RunSpec | None:
    try:
        return study_ledger.load_spec(study_dir, run_id)
    except (OSError, ValueError, TypeError):
        return None


def row_for(study_dir: Path, run_id: str, info: dict[str, Any], files: str = "ok",
            known: tuple[study_ledger.RunView, RunSpec | None] | None = None) -> tuple[str, ...]:
    """One table row (a run whose spec.json is missing or corrupt shows what status.json says);
    `files` is the damage column (see `damage`); `known` is the run's view and spec where the caller
    has read them."""
    run, spec = known or (study_ledger.view(study_dir, run_id), _spec(study_dir, run_id))
    directory = study_ledger.run_dir(study_dir, run_id)
    steps = run.steps or (spec.steps if spec else 0)
    metrics = last_train_row(directory)
    loss = f"{float(metrics['loss']):.4f}" if metrics and isinstance(metrics.get("loss"), (int, float)) else "-"
    progress = f"{run.step}/{steps} ({100 * run.step / steps:.0f}%)" if steps else "-"
    eta = _duration(eta_s(run, spec.batch_size * spec.seq_len, metrics)) if spec else "-"
    return (run_id, info["family"], info["variant"], info["size"], str(info["seed"]), run.state,
            progress, loss, eta, str(run.attempts), learned(directory), files, _numerics(directory))


def _numerics(run_dir: Path) -> str:
    """The run's training numerics path id(s) (jobs.run.numerics), `-` when none is recorded,
    `unreadable` for a damaged numerics.json."""
    try:
        return numerics.training_column(run_dir) or "-"
    except InputError:
        return "unreadable"


def numerics_lines(study_dir: Path, rows: list[tuple[str, ...]]) -> list[str]:
    """One line per numerics path id the study's runs trained on (id, label, runs), and a warning
    line when those ids conflict (two machines, or two kernel builds: `cli.numerics_ids.conflicting`):
    such runs differ beyond float rounding (docs/DESIGN.md). Ids that differ only in which passes used
    the kernels (an AR run and an AO-GPT run of one machine) are one path and give no warning."""
    run_dirs = []
    for row in rows:
        try:
            run_dirs.append(study_ledger.run_dir(study_dir, row[0]))
        except InputError:  # an id that is no run folder: its row already says so
            continue
    paths = numerics.path_counts(run_dirs)
    lines = [f"numerics {key}: {label} ({n} run{'s' if n != 1 else ''})" for key, (label, n) in paths.items()]
    moved = [d.name for d in run_dirs if _changed_path(d)]
    if moved:
        lines.append(f"numerics: {len(moved)} run{'s' if len(moved) != 1 else ''} changed path on a resume "
                     f"(a requeue onto another GPU model, CUDA or torch): {', '.join(moved)}")
    if numerics_ids.conflicting(list(paths)):
        lines.append(f"warning: the runs trained on {len(paths)} numerics paths; their values differ beyond "
                     "float rounding (docs/DESIGN.md, Numerics paths)")
    return lines


def _changed_path(run_dir: Path) -> bool:
    try:
        return len(numerics.segment_paths(run_dir)) > 1
    except InputError:
        return False


def learned(run_dir: Path) -> str:
    """`plateau` when an evaluated run is not clearly below its data's unigram baseline (on any
    dataset), `ok` when it is, `-` before evaluation or without baselines."""
    if not (run_dir / "eval.parquet").exists():
        return "-"
    try:
        table = plateau_table(read_records(run_dir))
    except Exception:  # an unreadable eval.parquet: the state column tells the rest
        return "-"
    if table.is_empty():
        return "-"
    return "plateau" if table["plateau"].any() else "ok"


def damage(study_dir: Path, run_id: str, verify_all: bool = False,
           known: tuple[study_ledger.RunView, RunSpec | None] | None = None,
           split_tokens: dict[tuple[str, str, str], int | None] | None = None) -> tuple[str, list[str]]:
    """(the `files` column, one warning line per problem) of one run: a missing folder or
    spec.json, a rebuilt status.json, missing or corrupt checkpoints of a trained run, an
    unreadable eval.parquet, a failed run (how to retry it). `known`: the run's view and spec
    where the caller has read them; `split_tokens`: training-split sizes read so far, by data."""
    directory = study_ledger.run_dir(study_dir, run_id)
    if not directory.is_dir():
        return "run-missing", [f"run {run_id}: its folder {directory} is missing; relaunch the study to train it again"]
    run, spec = known or (study_ledger.view(study_dir, run_id), _spec(study_dir, run_id))
    tags, out = [], []
    if spec is None:
        out.append(f"run {run_id}: spec.json is missing or corrupt; relaunch the study to rewrite it")
    status = read_status(directory)
    out += [f"run {run_id}: {w}" for w in status.get("warnings", []) if str(w).startswith("status:")]
    out += repeats_data(run_id, spec, split_tokens)
    for tag, line in _checkpoint_damage(directory, run_id, status, verify_all) + _records_damage(directory, run_id):
        tags.append(tag)
        out.append(line)
    if run.state == "trained" and not {"eval-unreadable", "eval-schema"} & set(tags):
        out.append(f"run {run_id}: {run.reason}; relaunch the study to evaluate it (it is not trained again)")
    if status.get("state") == "failed":
        out.append(f"run {run_id}: failed ({status.get('reason', 'no reason recorded')}); retry it: relaunch the "
                   f"study with --retry-failed")
    return ",".join(tags) or "ok", out


def _checkpoint_damage(directory: Path, run_id: str, status: dict, verify_all: bool) -> list[tuple[str, str]]:
    """Missing or corrupt checkpoints of a run whose training is done."""
    if status.get("state") != "done":
        return []
    saved = ckpt.checkpoint_dirs(directory)
    if not saved:
        return [("ckpt-missing", f"run {run_id}: done, but it has no checkpoint left under {directory / 'ckpt'}; its "
                 f"records stay usable, but evaluating it again means training it again")]
    size = sum(p.stat().st_size for p in saved[-1].rglob("*") if p.is_file())
    problem = ckpt.verify(saved[-1]) if verify_all or size <= VERIFY_MAX_BYTES else None
    if not problem:
        return []
    return [("ckpt-corrupt", f"run {run_id}: done, but its final checkpoint {saved[-1].name} is corrupt ({problem}); "
             f"rerun python -m jobs.train --run-dir {directory} to train it again from the last valid one")]


def repeats_data(run_id: str, spec: RunSpec | None,
                 split_tokens: dict[tuple[str, str, str], int | None] | None = None) -> list[str]:
    """A line for a run planned past one epoch of its training split (jobs.data.ledger);
    `split_tokens` remembers each (corpus, tokenizer, text field)'s split size across runs (hashing
    a corpus's identity again for each of 10,000 runs of one study costs seconds)."""
    if spec is None:
        return []
    memo = {} if split_tokens is None else split_tokens
    data = (spec.corpus, spec.tokenizer, spec.text_field)
    if data not in memo:
        memo[data] = train_tokens(spec)
    seen = coverage_columns(memo[data], spec.tokens)
    if not seen.get("epochs") or seen["epochs"] <= 1:
        return []
    return [f"run {run_id}: repeats data: {seen['epochs']:.2f} epochs of its training split "
            f"({seen['unique_tokens']:,} unique tokens of {spec.tokens:,}); repetition favours masked diffusion"]


def _records_damage(directory: Path, run_id: str) -> list[tuple[str, str]]:
    """An eval.parquet that exists but cannot be read (truncated, not parquet)."""
    path = directory / EVAL_FILE
    if not path.exists():
        return []
    try:
        read_stamp(path)
    except InputError as error:  # readable, but a column of the wrong kind (cli.schema)
        return [("eval-schema", f"run {run_id}: {error}; relaunch the study to evaluate the run again")]
    except Exception as error:  # polars raises several types for a torn file
        return [("eval-unreadable", f"run {run_id}: {path} is unreadable ({type(error).__name__}: truncated or "
                 f"corrupt); relaunch the study to evaluate the run again")]
    return []


def _known(study_dir: Path, run_id: str) -> tuple[study_ledger.RunView, RunSpec | None] | None:
    """The run's view and spec, read once for its row and its damage (None: no run folder)."""
    try:
        return study_ledger.view(study_dir, run_id), _spec(study_dir, run_id)
    except InputError:  # an id that is no run folder: damage and the row say so
        return None


def table(study_dir: Path, verify_all: bool = False,
          warnings: dict[str, list[str]] | None = None) -> tuple[list[tuple[str, ...]], Counter]:
    """Rows in launch order and the count of runs per state (plus `queue` for Slurm studies);
    each run's warning lines go into `warnings` when given."""
    doc = study_ledger.read_study(study_dir)
    if doc is None:
        raise InputError(f"study: {study_dir} holds no study.json; pass a study directory made by scaling.launch")
    split_tokens: dict[tuple[str, str, str], int | None] = {}
    known = {run_id: _known(study_dir, run_id) for run_id in doc["order"]}
    found = {run_id: damage(study_dir, run_id, verify_all, known[run_id], split_tokens) for run_id in doc["order"]}
    if warnings is not None:
        warnings.update({run_id: lines for run_id, (_, lines) in found.items()})
    rows = [row_for(study_dir, run_id, doc["runs"][run_id], found[run_id][0], known[run_id]) for run_id in doc["order"]]
    queue = queue_states(study_dir)
    if queue:
        rows = [(*row, queue.get(row[0], {}).get("queue_state", "-")) for row in rows]
    return rows, Counter(row[5] for row in rows)


def render(rows: list[tuple[str, ...]]) -> str:
    """Fixed-width text table with a header (`queue` as last column when the rows have it)."""
    header = COLUMNS + (QUEUE_COLUMN,) if rows and len(rows[0]) > len(COLUMNS) else COLUMNS
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


JSON_NUMBERS = {"seed": int, "loss": float, "tries": int}  # the other columns stay text (`-` -> null)


def as_json(study_dir: Path, rows: list[tuple[str, ...]], counts: Counter,
            warnings: dict[str, list[str]] | None = None, relaunch: dict | None = None) -> str:
    """The `--json` document: every row as an object keyed by column (with its `warnings`), the
    counts per state, and the relaunch a kill interrupted (`journal.pending_change`, or null)."""
    header = COLUMNS + (QUEUE_COLUMN,) if rows and len(rows[0]) > len(COLUMNS) else COLUMNS
    runs = [{**{key: None if cell == "-" else JSON_NUMBERS.get(key, str)(cell) for key, cell in zip(header, row)},
             "warnings": (warnings or {}).get(row[0], [])} for row in rows]
    return json.dumps({"study": str(study_dir), "runs": runs, "counts": dict(sorted(counts.items())),
                       "relaunch": relaunch}, indent=1)


def _some(ids: list[str], most: int = 3) -> str:
    shown = ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")
    return f"{len(ids)} ({shown})" if ids else "none"


def relaunch_lines(relaunch: dict | None) -> list[str]:
    """The `relaunch:` line for a relaunch a kill interrupted (`journal.pending_change`), or none."""
    if relaunch is None:
        return []
    written = "holds the new study" if relaunch["study_written"] else "does not hold the new study yet"
    return [f"relaunch: a relaunch was interrupted ({journal.JOURNAL_FILE}): study.json {written}; runs whose "
            f"spec.json is still to write: {_some(relaunch['specs_left'])}; runs it adds: "
            f"{_some(relaunch['runs_added'])}; runs show the specs it gives them; launch the study again to "
            "finish it"]


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = Parser(prog="python -m scaling.status", description=__doc__.splitlines()[0], error_prefix="status")
    parser.add_argument("study", help="study directory")
    parser.add_argument("--verify", action="store_true", help="checksum every done run's final checkpoint")
    parser.add_argument("--json", action="store_true", help="print one JSON object (runs and counts) instead of the table")
    args = parse(parser, argv)
    if isinstance(args, int):
        return args

    def body() -> int:
        warnings: dict[str, list[str]] = {}
        rows, counts = table(Path(args.study), args.verify, warnings)
        relaunch = journal.pending_change(Path(args.study))
        if args.json:
            print(as_json(Path(args.study), rows, counts, warnings, relaunch))
        else:
            print(render(rows))
            print(f"{len(rows)} runs: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
            for line in study_note(Path(args.study)) + numerics_lines(Path(args.study), rows) + relaunch_lines(relaunch):
                print(line)
        for row in rows:
            for warning in warnings.get(row[0], []):
                print(f"warning: {warning}", file=sys.stderr)
        return 0 if counts.get("done", 0) == len(rows) else 1

    return run_main("status", body)


if __name__ == "__main__":
    sys.exit(main())
