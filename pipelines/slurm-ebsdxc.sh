#!/bin/bash
# ebsdxc on SLURM inside one allocation: a Dask scheduler, one worker per GPU, ebsdxc as client.
#
# Take a copy to edit (it is shipped with ebsdxc, beside the recipes):
#   cp "$(python -c 'from ebsdxc._resources import data_dir; print(data_dir("pipelines"))')/slurm-ebsdxc.sh" .
#
# EDIT BEFORE USE (every place is marked EDIT):
#   1. the #SBATCH lines below: nodes, GPUs per node (--gres=gpu:G and --ntasks-per-node=G must
#      agree: one task = one worker = one GPU), CPUs per worker, time; remove one '#' of the
#      '##SBATCH --partition/--account' lines where your site needs them;
#   2. the software environment (module loads, virtual environment) further down.
# Then say what to process through the environment (sbatch passes it on) and submit:
#
#   SCAN=/data/scan.h5 REF=/data/ref.tif OUT=/data/scan.ebsdxc.h5 sbatch slurm-ebsdxc.sh
#   SCANS="/data/a.h5 /data/b.h5" REF=/data/ref.tif OUT=/data/results sbatch slurm-ebsdxc.sh
#   SCANS='/data/campaign/*.h5' REF=/data/ref.tif OUT=/data/results sbatch slurm-ebsdxc.sh
#
#   SCAN / SCANS  scan file(s), separated by spaces; several scans are one campaign processed by
#                 one 'ebsdxc process' on one cluster, one results file each ('dir/*.h5' is
#                 expanded by ebsdxc)
#   REF           reference pattern (TIFF); leave empty and put --ref-index in EXTRA_ARGS instead
#   OUT           one scan: the results file; several: a folder; empty: beside each scan
#   PIPELINE      recipe name or file (default hrebsd)
#   EXTRA_ARGS    more 'ebsdxc process' options, e.g. "--material Ni" or "--resume"
#
# A run that stops early (time limit, scancel, node failure) is continued by submitting the same
# job again with EXTRA_ARGS="--resume": only points not yet in the results file are processed.
# At its time limit or on scancel SLURM sends TERM to every process of the job at once; this
# script then stops them in order (the client, which marks the results file incomplete, then
# the workers, then the scheduler) within SLURM's grace time (KillWait, 30 s by default), each
# leaving at most one line in the log, no traceback.
#
# (The scheduler on the first node, a worker per GPU through srun, the client waiting for all
# workers, then 'ebsdxc process --cluster tcp://...'; see the numbered steps below.)
#
#SBATCH --job-name=ebsdxc
#SBATCH --nodes=2                 # EDIT: nodes
#SBATCH --gres=gpu:2              # EDIT: GPUs per node
#SBATCH --ntasks-per-node=2       # EDIT: = GPUs per node (one Dask worker per GPU)
#SBATCH --cpus-per-task=8         # EDIT: CPU cores per worker (reading and decompressing patterns)
#SBATCH --time=02:00:00           # EDIT: wall time
#SBATCH --output=ebsdxc-%j.out
##SBATCH --partition=gpu          # EDIT: GPU partition, where needed (remove one '#')
##SBATCH --account=EDIT-ME        # EDIT: project account, where needed (remove one '#')

set -euo pipefail

# ---- EDIT: software environment (the same on every node: srun passes it on) ------------------
# module load cuda/12.4
# source /path/to/venv/bin/activate
PYTHON=${PYTHON:-python}          # the Python that has ebsdxc and dask[distributed] installed

# ---- what to process ---------------------------------------------------------------------------
SCANS=${SCANS:-${SCAN:-}}
REF=${REF:-}
OUT=${OUT:-}
PIPELINE=${PIPELINE:-hrebsd}
EXTRA_ARGS=${EXTRA_ARGS:-}
WAIT_WORKERS_S=${WAIT_WORKERS_S:-600}   # how long to wait for all workers to start
THREADS_PER_WORKER=${THREADS_PER_WORKER:-1}  # 1 per GPU; raise it only for CPU-only nodes
DASK_INTERFACE=${DASK_INTERFACE:-}      # e.g. ib0: the network the workers reach the scheduler on

if [ -z "$SCANS" ]; then
    echo "slurm-ebsdxc.sh: set SCAN (or SCANS) to the scan file(s) to process" >&2
    exit 2
fi
PYTHON=$(command -v "$PYTHON") || { echo "slurm-ebsdxc.sh: no Python '$PYTHON' on PATH" >&2; exit 2; }
export PYTHON

JOB=${SLURM_JOB_ID:-$$}
NNODES=${SLURM_JOB_NUM_NODES:-1}
NWORKERS=${SLURM_NTASKS:-$((NNODES * ${SLURM_NTASKS_PER_NODE:-1}))}
# The scheduler file must be on a filesystem every node sees (the submit folder usually is).
SCHED=${SCHED:-$PWD/ebsdxc-dask-$JOB.json}
export SCHED THREADS_PER_WORKER DASK_INTERFACE
rm -f "$SCHED"    # a stale file would send the workers to a scheduler that is gone

# The scheduler and the workers start with TERM blocked (a pending TERM waits, SIGKILL still
# ends them): SLURM's TERM reaches every process at once, and a scheduler that closed before its
# client left, or workers before their tasks were cancelled, log tracebacks. This script stops
# them itself, in order: workers through their nannies, then the scheduler with INT (on which
# Dask closes as on TERM). NO_TERM runs a Python module with TERM blocked; the worker processes
# a nanny starts inherit the mask. It starts multiprocessing's resource tracker first, as the
# tracker unblocks TERM in the process that starts it.
NO_TERM='import runpy, signal, sys
from multiprocessing import resource_tracker
resource_tracker.ensure_running()
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)'
export NO_TERM

SCHED_PID=""
WORKERS_PID=""
CLIENT_PID=""

# shellcheck disable=SC2317  # called by the EXIT trap
gone() {
    # Wait up to $1 s for the processes $2... to end; true when they all have.
    local deadline=$((SECONDS + $1)) pid alive
    shift
    while :; do
        alive=0
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ "$alive" = 0 ] && return 0
        [ "$SECONDS" -ge "$deadline" ] && return 1
        sleep 0.5
    done
}

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    # In order: the client (TERM: it lets its tasks go, marks the results file incomplete and
    # says so in one line; SLURM may have sent it TERM already, a second one is ignored), the
    # workers one by one through their nannies once their running tasks end, while the
    # scheduler still listens (ebsdxc.cluster.stop_workers; srun's step ends with them), then
    # the scheduler (INT).
    # Dask's own shutdown (client.shutdown(): the scheduler first) leaves every worker writing
    # to a closed connection, a CommClosedError traceback in the log of a job that went well.
    # Short: SLURM kills every process some 30 s after its TERM (KillWait).
    set +e
    local pid
    if [ -n "$CLIENT_PID" ]; then
        kill -TERM "$CLIENT_PID" 2>/dev/null
        gone 6 "$CLIENT_PID" || kill -KILL "$CLIENT_PID" 2>/dev/null
        wait "$CLIENT_PID" 2>/dev/null
    fi
    if [ -n "$WORKERS_PID" ] && [ -s "$SCHED" ] && kill -0 "$SCHED_PID" 2>/dev/null; then
        # Cancelled while workers were still starting: let them join (5 s at most), so that
        # none is left to find its scheduler gone.
        timeout 15 "$PYTHON" -c '
import sys, distributed
from ebsdxc.cluster import stop_workers
with distributed.Client(scheduler_file=sys.argv[1], timeout="5s") as client:
    try:
        client.wait_for_workers(int(sys.argv[2]), timeout=5)
    except TimeoutError:
        pass
    stop_workers(client, timeout=8)
' "$SCHED" "$NWORKERS" >/dev/null 2>&1
        gone 2 "$WORKERS_PID"
    fi
    # The scheduler stops on INT (its TERM is blocked); what is left ends on TERM or KILL.
    [ -n "$WORKERS_PID" ] && kill -TERM "$WORKERS_PID" 2>/dev/null   # srun ends its step
    [ -n "$SCHED_PID" ] && kill -INT "$SCHED_PID" 2>/dev/null
    for pid in $WORKERS_PID $SCHED_PID; do
        gone 3 "$pid" || kill -KILL "$pid" 2>/dev/null
    done
    for pid in $WORKERS_PID $SCHED_PID; do
        wait "$pid" 2>/dev/null
    done
    rm -f "$SCHED"
}
trap cleanup EXIT
# SLURM's time limit or scancel: one line, then cleanup (EXIT) stops the rest in order.
trap 'echo "slurm-ebsdxc.sh: cancelled (SIGTERM); stopping the client, the workers, then the scheduler" >&2
      exit 143' TERM
trap 'exit 130' INT

# Commands run in the background and are waited for: a trap runs at once during 'wait', but
# only after a command in the foreground has ended.
waited() {
    "$@" &
    CLIENT_PID=$!
    local status=0
    wait "$CLIENT_PID" || status=$?
    CLIENT_PID=""
    return "$status"
}

iface=()
if [ -n "$DASK_INTERFACE" ]; then
    iface=(--interface "$DASK_INTERFACE")
fi

# 1. The scheduler, in the background on this (the first) node. --port 0: any free port (the
#    address goes into the scheduler file); no dashboard (nobody can reach it on a compute node),
#    and its HTTP endpoint on any free port (8787 may be taken by another job on the node).
"$PYTHON" -c "$NO_TERM" distributed.cli.dask_scheduler --scheduler-file "$SCHED" --port 0 --no-dashboard \
    --dashboard-address :0 \
    ${iface[@]+"${iface[@]}"} &
SCHED_PID=$!

for _ in $(seq 120); do
    [ -s "$SCHED" ] && break
    kill -0 "$SCHED_PID" 2>/dev/null || { echo "slurm-ebsdxc.sh: the Dask scheduler did not start" >&2; exit 1; }
    sleep 0.5
done
[ -s "$SCHED" ] || { echo "slurm-ebsdxc.sh: no scheduler file $SCHED after 60 s" >&2; exit 1; }

# 2. One worker per task, that is per GPU (the #SBATCH lines give one task per GPU), each with
#    one thread: ebsdxc builds one GPU pipeline per worker thread.
#    Each task must see its own GPU. A task of this step sees all GPUs of its node that the job
#    holds (SLURM lists them in CUDA_VISIBLE_DEVICES), so it keeps the one at its own position
#    on the node, SLURM_LOCALID (0, 1, ... per node). That is what 'srun --gpu-bind=single:1'
#    or CUDA_VISIBLE_DEVICES=$SLURM_LOCALID do, but it also works where the IDs in
#    CUDA_VISIBLE_DEVICES are not 0..G-1 and where SLURM already binds one GPU per task (a list
#    of one is kept as it is); no CUDA_VISIBLE_DEVICES (no GPUs): nothing changes.
#    --cpus-per-task is repeated for srun: since SLURM 22.05 srun no longer takes it from sbatch.
#    --quiet: srun's own notes on a cancelled step (three lines) add nothing to SLURM's one.
# shellcheck disable=SC2016  # expanded by the task's own shell, on its node
WORKER='
set -eu
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
    export CUDA_VISIBLE_DEVICES=${gpus[$(( ${SLURM_LOCALID:-0} % ${#gpus[@]} ))]}
fi
iface=()
[ -n "${DASK_INTERFACE:-}" ] && iface=(--interface "$DASK_INTERFACE")
exec "$PYTHON" -c "$NO_TERM" distributed.cli.dask_worker --scheduler-file "$SCHED" \
    --nthreads "$THREADS_PER_WORKER" --nworkers 1 --no-dashboard --resources GPU=1 \
    --name "ebsdxc-$(hostname)-${SLURM_LOCALID:-0}" --local-directory "${TMPDIR:-/tmp}" \
    --death-timeout 120 ${iface[@]+"${iface[@]}"}
'
srun --quiet --nodes="$NNODES" --ntasks="$NWORKERS" --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    --kill-on-bad-exit=0 bash -c "$WORKER" &
WORKERS_PID=$!

# 3. Wait until every worker has joined (a worker that cannot start fails the job here).
echo "slurm-ebsdxc.sh: waiting for $NWORKERS Dask workers on $NNODES node(s)" >&2
waited "$PYTHON" -c '
import sys, distributed
client = distributed.Client(scheduler_file=sys.argv[1], timeout="60s")
client.wait_for_workers(int(sys.argv[2]), timeout=float(sys.argv[3]))
client.close()
' "$SCHED" "$NWORKERS" "$WAIT_WORKERS_S"
ADDRESS=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' "$SCHED")
echo "slurm-ebsdxc.sh: $NWORKERS workers at $ADDRESS" >&2

# 4. The client: ebsdxc reads nothing itself, sends row tasks to the workers and writes the
#    results file(s) here, task by task.
set -f   # SCANS and EXTRA_ARGS are split on spaces, globs are left to ebsdxc
read -ra scans <<< "$SCANS"
read -ra extra <<< "$EXTRA_ARGS"
set +f
args=(--cluster "$ADDRESS" --pipeline "$PIPELINE")
if [ -n "$REF" ]; then
    args+=(--ref "$REF")
fi
if [ -n "$OUT" ]; then
    args+=(-o "$OUT")
fi
status=0
waited "$PYTHON" -m ebsdxc process "${scans[@]}" "${args[@]}" ${extra[@]+"${extra[@]}"} || status=$?
exit "$status"   # the EXIT trap shuts the scheduler and the workers down
