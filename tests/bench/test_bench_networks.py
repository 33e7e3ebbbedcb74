"""The generation and training benches take `--network` and print their targets on each network:
by default the studies' default network (rotary positions) and the same with learned ones."""
import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def test_bench_generation_times_both_encodings_and_prints_the_rope_over_learned_target(capsys):
    bench = _bench("bench_generation")
    assert bench.main(["--size", "0.1M", "--length", "8", "--steps", "8", "--repeats", "1", "--warmup", "0",
                       "--families", "ar,aogpt", "--threads", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if line and not line.startswith("#")][1:]
    assert rows == ["gpt2,pos=rope", "gpt2"]
    assert "# gpt2,pos=rope: AO-GPT/AR" in out and "# gpt2: AO-GPT/AR" in out
    assert sum("rope/learned" in line and "target <= 1.15" in line for line in out.splitlines()) == 2


@pytest.mark.parametrize("name", ["bench_generation", "bench_models"])
def test_the_benches_refuse_an_unknown_network_with_status_2(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench(name).main(["--network", "gpt3"])
    assert exit_.value.code == 2 and "--network: network: unknown network 'gpt3'" in capsys.readouterr().err


def test_bench_compile_refuses_too_few_steps_to_time(capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench("bench_compile").main(["--steps", "6", "--skip", "5"])
    assert exit_.value.code == 2 and "--steps: must exceed --skip + 2" in capsys.readouterr().err
