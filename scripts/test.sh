#!/usr/bin/env bash
# The project's test command: starts a private single-node Slurm cluster when this machine can
# run one (root + apt), runs the whole test suite, and stops exactly what it started.
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$HOME/.cache/aoscale/torch_extensions}
started=0
if [ "${AOSCALE_NO_SLURM:-0}" != 1 ] && [ "$(id -u)" = 0 ] && [ -x scripts/slurm-cluster.sh ]; then
  if bash scripts/slurm-cluster.sh start; then started=1; else echo "[test] Slurm did not start; Slurm tests will skip"; fi
fi
python -m pytest "$@"
rc=$?
[ "$started" = 1 ] && bash scripts/slurm-cluster.sh stop
exit $rc
