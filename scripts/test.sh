#!/usr/bin/env bash
# The project's test command: starts a private single-node Slurm cluster when this machine can
# run one (root + apt), runs the whole test suite, and stops exactly what it started.
#
# With no arguments the suite runs as two pytest processes side by side, so both cores stay busy:
# the Slurm, Ray and slow tests (the cluster tests mostly wait on schedulers and workers, and stay
# serial among themselves, so they never compete for the test cluster), and everything else. With
# arguments, one pytest process runs them as given.
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$HOME/.cache/aoscale/torch_extensions}
started=0
if [ "${AOSCALE_NO_SLURM:-0}" != 1 ] && [ "$(id -u)" = 0 ] && [ -x scripts/slurm-cluster.sh ]; then
  if bash scripts/slurm-cluster.sh start; then started=1; else echo "[test] Slurm did not start; Slurm tests will skip"; fi
fi
if [ $# -gt 0 ]; then
  python -m pytest "$@"
  rc=$?
else
  base=$(mktemp -d "${TMPDIR:-/tmp}/aoscale-tests-XXXXXX")
  cluster_log="$base/cluster.log"
  python -m pytest -p no:cacheprovider --basetemp "$base/cluster" -m "(slurm or ray or slow) and not rehearsal" \
    >"$cluster_log" 2>&1 &
  cluster_pid=$!
  trap 'kill "$cluster_pid" 2>/dev/null' INT TERM  # an interrupted run leaves no pytest behind
  python -m pytest -p no:cacheprovider --basetemp "$base/rest" -m "not (slurm or ray or slow) and not rehearsal"
  rest_rc=$?
  wait "$cluster_pid"
  cluster_rc=$?
  echo "[test] the Slurm, Ray and slow tests (run beside the rest):"
  cat "$cluster_log"
  # pytest exits 5 when a marker selects nothing: not a failure
  [ "$cluster_rc" = 5 ] && cluster_rc=0
  rc=$(( rest_rc != 0 ? rest_rc : cluster_rc ))
  echo "[test] rest: exit $rest_rc; Slurm, Ray and slow: exit $cluster_rc"
  [ "$rc" = 0 ] && rm -rf "$base"
fi
[ "$started" = 1 ] && bash scripts/slurm-cluster.sh stop
exit $rc
