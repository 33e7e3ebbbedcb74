"""Tokenisation into the sharded token cache: throughput with 1 and 2 workers, peak memory.

    python bench/bench_data.py [--size-mb 300] [--tokenizer gpt2] [--data DIR]
    python bench/bench_data.py --prepare [--repeat 3] [--data DIR]

`--prepare`: the study's preparation stage (`jobs.data.prepare.prepare`, what `aoscale prepare`
runs) on the data kit's WebText snippets (9,447 records of 63 GPT-2 tokens, as a `save_to_disk`
folder, train = the test file, validation = the valid file; `--copies K` repeats them K times,
prefixed), each build a fresh cache in its own
process, with 1 and 2 processes alternately, `--repeat` times; prints the median tokens/s of each,
their ratio (from this one run), that every build gave the same bytes, and the load average before
and after (the machine may be shared: compare only ratios of one run).

A corpus of `--size-mb` MB of text (documents of ~5 kB, OpenWebText's mean, cut from the offline
data kit's English texts and repeated) is written as a memory-mapped `datasets` Arrow table, then
tokenised into a fresh cache with 1 and with 2 worker processes, at the full and at half the
size. Each build runs in its own process; peak RSS is the builder's and its largest worker's.

Targets: 2 workers >= 1.7x one worker; peak RSS <= 1.5 GB and within 10 % between the two sizes.
Prints the projected wall time for OpenWebText (~38 GB of text) on 64 cores. On a shared machine
compare only the ratios printed by one run.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DOC_CHARS = 5_000  # OpenWebText: ~38 GB of text over ~8M documents (Gokaslan & Cohen 2019)
OWT_TEXT_MB = 38_000
OWT_CORES = 64
KIT_TEXTS = ("text/wikitext-2-raw/wiki.test.raw", "text/tinyshakespeare/input.txt",
             "text/lm1b/news.en.heldout-00000-of-00050", "text/ptb/ptb.test.txt")
RATIO_TARGET = 1.7
RSS_TARGET_MB = 1536
RSS_SPREAD = 0.10


def kit_documents(data_dir: Path) -> list[str]:
    """The data kit's texts cut into ~DOC_CHARS documents at line ends."""
    docs = []
    for name in KIT_TEXTS:
        text, start = (data_dir / name).read_text("utf-8"), 0
        while start < len(text):
            cut = text.find("\n", start + DOC_CHARS)
            cut = len(text) if cut < 0 else cut + 1
            docs.append(text[start:cut])
            start = cut
    return docs


def make_corpus(data_dir: Path, size_mb: float, cache: Path):
    """A `datasets.Dataset` of >= size_mb MB of text, written to Arrow one document at a time."""
    import datasets

    base = kit_documents(data_dir)
    target = int(size_mb * 1e6)

    def rows():
        written, copy = 0, 0
        while written < target:
            for doc in base:
                text = f"[{copy}] {doc}"  # copies differ, as documents of a real corpus do
                written += len(text.encode("utf-8"))
                yield {"text": text}
                if written >= target:
                    return
            copy += 1

    datasets.disable_progress_bars()
    return datasets.Dataset.from_generator(rows, cache_dir=str(cache))


def _build(dataset, tokenizer: str, workers: int, folder: str, queue) -> None:
    from jobs.data import tokencache

    source = tokencache.DatasetSource(dataset, "text")
    plan = tokencache.Plan({"train": source}, tokenizer, tokencache.held_out_p(len(source)))
    start = time.perf_counter()
    manifest = tokencache.build(Path(folder), plan, {"corpus": "bench"}, workers=workers)
    wall_s = time.perf_counter() - start
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    self_mb, child_mb = (u.ru_maxrss / 1024 for u in usage)
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage)
    tokens = sum(split["tokens"] for split in manifest["splits"].values())
    queue.put({"wall_s": wall_s, "cpu_s": cpu_s, "rss_mb": max(self_mb, child_mb), "builder_mb": self_mb,
               "worker_mb": child_mb, "tokens": tokens})


def measure(dataset, tokenizer: str, workers: int, scratch: Path) -> dict:
    """One fresh build in its own process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    folder = tempfile.mkdtemp(dir=scratch)
    process = context.Process(target=_build, args=(dataset, tokenizer, workers, folder, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def text_mb(dataset) -> float:
    return sum(len(t.encode("utf-8")) for batch in dataset.iter(batch_size=4096)
               for t in batch["text"]) / 1e6


def saved_webtext(data_dir: Path, folder: Path, copies: int = 1) -> Path:
    """The kit's WebText snippets as a `save_to_disk` DatasetDict (no Arrow conversion at prepare
    time); with `copies` > 1 each record also appears prefixed "[k] " for k = 1 .. copies - 1."""
    import json

    import datasets

    def rows(name: str) -> list[dict]:
        text = (data_dir / "text/webtext-snippets" / name).read_text("utf-8")
        records = [json.loads(line)["text"] for line in text.splitlines() if line.strip()]
        return [{"text": f"[{k}] {r}" if k else r} for k in range(copies) for r in records]

    datasets.disable_progress_bars()
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows("webtext.test.jsonl")),
                          "validation": datasets.Dataset.from_list(rows("webtext.valid.jsonl"))}).save_to_disk(str(folder))
    return folder


def _prepare(corpus: str, workers: int, cache: str, queue) -> None:
    os.environ["AOSCALE_CACHE"] = cache
    from jobs.data.prepare import Corpus, prepare

    def cpu_s() -> float:  # this process and its finished workers
        usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        return sum(u.ru_utime + u.ru_stime for u in usage)

    start, cpu_start = time.perf_counter(), cpu_s()
    with open(os.devnull, "w") as quiet:
        (manifest,) = prepare([Corpus(corpus, "gpt2")], workers=workers, out=quiet)
    wall_s = time.perf_counter() - start
    queue.put({"wall_s": wall_s, "cpu_s": cpu_s() - cpu_start,
               "tokens": sum(s["tokens"] for s in manifest["splits"].values()),
               "sha256": [manifest["splits"][s]["sha256"] for s in sorted(manifest["splits"])]})


def prepare_mode(args: argparse.Namespace) -> int:
    """1 and 2 preparation processes on the kit's WebText snippets, alternately, `args.repeat` times."""
    import statistics

    load_before = os.getloadavg()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        corpus = str(saved_webtext(Path(args.data), scratch / "webtext", args.copies))
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for round_ in range(args.repeat):
            for workers in (1, 2):
                queue = context.Queue()
                process = context.Process(target=_prepare, args=(corpus, workers, tempfile.mkdtemp(dir=scratch), queue))
                process.start()
                result = queue.get()
                process.join()
                runs[workers].append(result)
                print(f"round {round_ + 1}, {workers} process(es): {result['tokens']:,} tokens in "
                      f"{result['wall_s']:.2f} s = {result['tokens'] / result['wall_s']:,.0f} tokens/s "
                      f"({result['cpu_s'] / result['wall_s']:.2f} cores busy)", flush=True)
    rate = {w: statistics.median(r["tokens"] / r["wall_s"] for r in runs[w]) for w in runs}
    same = len({tuple(r["sha256"]) for w in runs for r in runs[w]}) == 1
    print(f"prepare, WebText snippets x {args.copies}: median {rate[1]:,.0f} tokens/s with 1 process, {rate[2]:,.0f} with 2: "
          f"ratio {rate[2] / rate[1]:.2f}x; every build byte-identical: {same}")
    print(f"load average (1, 5, 15 min) before {', '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores (shared: other processes may run)")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=float, default=300.0, help="text size of the full corpus (MB)")
    p.add_argument("--tokenizer", default="gpt2")
    p.add_argument("--data", default=os.environ.get("AOSCALE_DATA") or str(REPO.parent / "shared" / "data"),
                   help="the offline data kit (default $AOSCALE_DATA, else ../shared/data)")
    p.add_argument("--prepare", action="store_true", help="the preparation stage on the kit's WebText snippets, "
                   "1 and 2 processes")
    p.add_argument("--repeat", type=int, default=3, help="--prepare: builds per process count (median taken)")
    p.add_argument("--copies", type=int, default=1, help="--prepare: the snippets this many times (default 1: "
                   "2.8 MB, where starting a worker costs more than tokenising)")
    args = p.parse_args(argv)
    if args.prepare:
        return prepare_mode(args)
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        full = make_corpus(Path(args.data), args.size_mb, scratch / "hf")
        half = full.select(range(len(full) // 2))
        sizes = {"full": (full, text_mb(full)), "half": (half, text_mb(half))}
        print(f"corpus: {len(full)} documents, {sizes['full'][1]:.0f} MB of text; half: "
              f"{sizes['half'][1]:.0f} MB; tokenizer {args.tokenizer}; {os.cpu_count()} cores")
        results = {}
        for label, (dataset, mb) in sizes.items():
            for workers in (1, 2):
                r = measure(dataset, args.tokenizer, workers, scratch)
                results[label, workers] = {**r, "mb_s": mb / r["wall_s"]}
                print(f"{label:>4} {workers} worker(s): {mb / r['wall_s']:6.2f} MB/s "
                      f"({r['wall_s']:.1f} s, {r['tokens']:,} tokens; {mb / r['cpu_s']:.2f} MB per "
                      f"CPU-second, {r['cpu_s'] / r['wall_s']:.2f} cores busy), peak RSS builder "
                      f"{r['builder_mb']:.0f} MB, largest worker {r['worker_mb']:.0f} MB", flush=True)
    report(results)
    return 0


def report(results: dict) -> None:
    ratio = {label: results[label, 2]["mb_s"] / results[label, 1]["mb_s"] for label in ("full", "half")}
    rss = {label: max(results[label, w]["rss_mb"] for w in (1, 2)) for label in ("full", "half")}
    spread = abs(rss["full"] - rss["half"]) / rss["half"]
    print(f"2 workers / 1 worker: {ratio['full']:.2f}x (half size {ratio['half']:.2f}x); "
          f"target >= {RATIO_TARGET}x: {'met' if ratio['full'] >= RATIO_TARGET else 'NOT met'}")
    print(f"peak RSS: full {rss['full']:.0f} MB, half {rss['half']:.0f} MB (spread {spread:.1%}); "
          f"target <= {RSS_TARGET_MB} MB and <= {RSS_SPREAD:.0%}: "
          f"{'met' if max(rss.values()) <= RSS_TARGET_MB and spread <= RSS_SPREAD else 'NOT met'}")
    per_core = results["full", 1]["mb_s"]
    efficiency = min(ratio["full"] / 2, 1.0)
    wall_s = OWT_TEXT_MB / (per_core * OWT_CORES * efficiency)
    print(f"projected OpenWebText ({OWT_TEXT_MB / 1000:.0f} GB of text) on {OWT_CORES} cores: "
          f"{wall_s / 60:.0f} min ({per_core:.2f} MB/s per core here x {OWT_CORES} x "
          f"{efficiency:.2f} parallel efficiency measured at 2 workers)")
    cpu = {w: sizes_cpu(results, w) for w in (1, 2)}
    print(f"CPU cost: {cpu[1]:.2f} MB per CPU-second with 1 worker, {cpu[2]:.2f} with 2 "
          f"({cpu[2] / cpu[1]:.2f}x; 1.00x = no extra work per MB with more workers); with idle cores, "
          f"OpenWebText on {OWT_CORES} cores: {OWT_TEXT_MB / (cpu[2] * OWT_CORES) / 60:.0f} min")


def sizes_cpu(results: dict, workers: int) -> float:
    """MB of text per CPU-second (builder and workers together), over both sizes."""
    runs = [results[label, workers] for label in ("full", "half")]
    return sum(r["mb_s"] * r["wall_s"] for r in runs) / sum(r["cpu_s"] for r in runs)


if __name__ == "__main__":
    sys.exit(main())
