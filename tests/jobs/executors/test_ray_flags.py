"""The Ray driver's command line (`python -m jobs.executors.ray_tune`) is built from RayOptions'
declared flags, so each flag has the name `scaling.launch` gives it. No Ray is started here."""
from __future__ import annotations

import pytest

from cli.options import flags
from jobs.executors.ray_tune import RayOptions, driver_parser, main, options_from_flags, ray_importable
from scaling.launch import parser as launch_parser

needs_ray = pytest.mark.skipif(not ray_importable(), reason="ray is not installed")


def option_strings(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def test_every_ray_flag_of_the_launcher_is_a_flag_of_the_driver():
    ray_flags = {f"--{f.name}" for f in flags(RayOptions)}
    assert {"--ray-address", "--ray-num-cpus", "--ray-env", "--max-concurrent-trials"} <= ray_flags
    assert ray_flags | {"--max-retries"} <= option_strings(launch_parser())
    assert option_strings(driver_parser()) - {"-h", "--help"} == ray_flags | {"--max-retries"}


def test_the_driver_reads_the_launchers_flag_names():
    args = driver_parser().parse_args(["study", "r1", "r2", "--ray-num-cpus", "2", "--ray-env", "B=2", "--ray-env",
                                       "A=1", "--max-concurrent-trials", "3", "--cpus-per-trial", "0.5"])
    assert (args.study, args.run_dirs, args.max_retries) == ("study", ["r1", "r2"], 1)
    assert (args.ray_num_cpus, args.ray_env, args.max_concurrent_trials) == (2, ["B=2", "A=1"], 3)
    assert args.cpus_per_trial == 0.5 and args.ray_address is None and args.gpus_per_trial is None


def test_the_old_driver_flag_name_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["study", "run", "--num-cpus", "2"])
    assert exit_.value.code == 2 and "--num-cpus" in capsys.readouterr().err


@needs_ray
def test_options_from_flags_types_the_env_and_validates():
    opts = options_from_flags({"env": ["B=2", "A=1"], "num_cpus": 2, "max_concurrent": 3}, max_retries=4)
    assert opts == RayOptions(env=(("A", "1"), ("B", "2")), num_cpus=2, max_concurrent=3, max_retries=4)
    with pytest.raises(ValueError, match="^cpus_per_trial: 0 must be > 0"):
        options_from_flags({"cpus_per_trial": 0}, max_retries=1)
    with pytest.raises(ValueError, match="^ray_env: 'NOEQUALS' is not KEY=VALUE"):
        options_from_flags({"env": ["NOEQUALS"]}, max_retries=1)


@needs_ray
def test_a_bad_driver_value_exits_2_with_the_field_and_fix(capsys):
    assert main(["study", "run", "--gpus-per-trial", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: gpus_per_trial: 2 GPUs for a trial")
