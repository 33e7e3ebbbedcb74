"""The dry-run's memory plan: each run's micro-batch x accumulation x ranks and GiB per rank under
`--gpu-memory` (a planning setting), and the one-line refusal of a run that cannot fit even at
micro-batch 1 (scaling.plan.launch_checks.check_fit)."""
from __future__ import annotations

from jobs.train.preflight import plan_micro_batch
from scaling import launch

GIB = 2**30
USED_BY = ["--sizes", "125M,350M,760M", "--seeds", "3", "--backend", "slurm", "--gpus-per-node", "8", "--dry-run"]


def test_the_used_by_command_plans_every_run_to_fit_eight_80_gib_gpus(tmp_path, capsys):
    assert launch.main([*USED_BY, "--study-dir", str(tmp_path / "study")]) == 0
    out = capsys.readouterr().out
    assert "memory plan on --gpu-memory 80 GiB per GPU, the default" in out and "memory model: per rank:" in out
    study = launch.study_from_args(launch.parser().parse_args(USED_BY), 8)
    for cell in study.cells:
        micro, accumulation, need = plan_micro_batch(cell.spec, 8, 80 * GIB)
        assert need <= 72 * GIB and micro * accumulation * 8 == cell.spec.batch_size == 1024
        assert f"{cell.run_id}  {cell.spec.size}  {micro} x {accumulation} x 8 = 1024" in out
    assert not (tmp_path / "study").exists()


def test_a_run_that_cannot_fit_the_assumed_gpu_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    study_dir = tmp_path / "study"
    assert launch.main([*USED_BY, "--study-dir", str(study_dir), "--gpu-memory", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("launch: gpu-memory: run ")
    assert "(ar 760M)" in err and "fix: more GPUs" in err and not study_dir.exists()


def test_the_gpu_memory_setting_renames_no_study_and_changes_no_run():
    plain = launch.study_from_args(launch.parser().parse_args(USED_BY))
    planned = launch.study_from_args(launch.parser().parse_args([*USED_BY, "--gpu-memory", "40"]))
    assert (planned.name, planned.run_ids) == (plain.name, plain.run_ids)
