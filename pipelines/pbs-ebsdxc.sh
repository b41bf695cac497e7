#!/bin/bash
# ebsdxc on PBS Pro inside one job: a Dask scheduler, one worker per GPU, ebsdxc as client.
#
# Take a copy to edit (it is shipped with ebsdxc, beside the recipes):
#   cp "$(python -c 'from ebsdxc._resources import data_dir; print(data_dir("pipelines"))')/pbs-ebsdxc.sh" .
#
# EDIT BEFORE USE (every place is marked EDIT):
#   1. the #PBS lines below: chunks = nodes, CPUs and GPUs per node, wall time; remove one '#'
#      of the '##PBS -q/-A' lines where your site needs a queue or an account;
#   2. GPUS_PER_NODE (= ngpus of the select line) and ENV_SETUP (module loads, virtual
#      environment) further down.
# Then say what to process (qsub passes variables with -v) and submit:
#
#   qsub -v SCAN=/data/scan.h5,REF=/data/ref.tif,OUT=/data/scan.ebsdxc.h5 pbs-ebsdxc.sh
#   qsub -v "SCANS=/data/a.h5 /data/b.h5,REF=/data/ref.tif,OUT=/data/results" pbs-ebsdxc.sh
#
#   SCAN / SCANS  scan file(s), separated by spaces; several scans are one campaign processed by
#                 one 'ebsdxc process' on one cluster, one results file each ('dir/*.h5' is
#                 expanded by ebsdxc)
#   REF           reference pattern (TIFF); leave empty and put --ref-index in EXTRA_ARGS instead
#   OUT           one scan: the results file; several: a folder; empty: beside each scan
#   PIPELINE      recipe name or file (default hrebsd)
#   EXTRA_ARGS    more 'ebsdxc process' options, e.g. "--material Ni" or "--resume"
#
# A run that stops early (wall time, qdel, node failure) is continued by submitting the same job
# again with EXTRA_ARGS=--resume: only points not yet in the results file are processed.
# At its wall time or on qdel PBS sends TERM to every process of the job at once; this script
# then stops them in order (the client, which marks the results file incomplete, then the
# workers, then the scheduler) within PBS's grace time (kill_delay, 10 s by default), each
# leaving at most one line in the log, no traceback.
#
#PBS -N ebsdxc
#PBS -l select=2:ncpus=16:ngpus=2
#PBS -l place=scatter
#PBS -l walltime=02:00:00
#PBS -j oe
##PBS -q gpu
##PBS -A EDIT-ME
# EDIT above: select=NODES:ncpus=CPUS_PER_NODE:ngpus=GPUS_PER_NODE (place=scatter: one chunk per
# node), walltime; queue (-q) and account (-A) where needed (remove one '#').

set -euo pipefail

# ---- EDIT: GPUs per node (= ngpus above): one Dask worker each ----------------------------------
GPUS_PER_NODE=${GPUS_PER_NODE:-2}

# ---- EDIT: software environment, run here AND on every node before its workers start --------
# (the workers are started through PBS, which does not pass this script's environment on)
ENV_SETUP=${ENV_SETUP:-'
# module load cuda/12.4
# source /path/to/venv/bin/activate
'}
eval "$ENV_SETUP"
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
LAUNCHER=${LAUNCHER:-pbsdsh}            # how workers start on the nodes: pbsdsh or ssh (see 2.)

cd "${PBS_O_WORKDIR:-.}"   # PBS starts job scripts in $HOME; paths are relative to qsub's folder
if [ -z "$SCANS" ]; then
    echo "pbs-ebsdxc.sh: set SCAN (or SCANS) to the scan file(s) to process (qsub -v SCAN=...)" >&2
    exit 2
fi
PYTHON=$(command -v "$PYTHON") || { echo "pbs-ebsdxc.sh: no Python '$PYTHON' on PATH" >&2; exit 2; }
if [ -z "${PBS_NODEFILE:-}" ] || [ ! -s "$PBS_NODEFILE" ]; then
    echo "pbs-ebsdxc.sh: no PBS_NODEFILE: submit this script with qsub" >&2
    exit 2
fi

JOB=${PBS_JOBID:-$$}
JOB=${JOB%%.*}
# Each host once, with the index of its first entry in PBS_NODEFILE (pbsdsh -n counts entries).
mapfile -t NODES < <(awk 'NF && !seen[$1]++ {print $1}' "$PBS_NODEFILE")
mapfile -t NODE_INDEX < <(awk 'NF && !seen[$1]++ {print NR - 1}' "$PBS_NODEFILE")
NWORKERS=$((${#NODES[@]} * GPUS_PER_NODE))
# The scheduler file and the worker script must be on a filesystem every node sees.
SCHED=${SCHED:-$PWD/ebsdxc-dask-$JOB.json}
WORKER_SH=$PWD/ebsdxc-dask-$JOB-worker.sh
rm -f "$SCHED"    # a stale file would send the workers to a scheduler that is gone

# The scheduler and the workers start with TERM blocked (a pending TERM waits, SIGKILL still
# ends them): PBS's TERM reaches every process of the job at once, and a scheduler that closed
# before its client left, or workers before their tasks were let go, log tracebacks. This script
# stops them itself, in order: workers through their nannies, then the scheduler with INT (on
# which Dask closes as on TERM). NO_TERM runs a Python module with TERM blocked; the worker
# processes a nanny starts inherit the mask. It starts multiprocessing's resource tracker first,
# as the tracker unblocks TERM in the process that starts it.
NO_TERM='import runpy, signal, sys
from multiprocessing import resource_tracker
resource_tracker.ensure_running()
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)'

SCHED_PID=""
CLIENT_PID=""
LAUNCH_PIDS=()

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
    # says so in one line; PBS may have sent it TERM already, a second one is ignored), the
    # workers one by one through their nannies once their running tasks end, while the
    # scheduler still listens (ebsdxc.cluster.stop_workers; the node scripts end with them),
    # then the scheduler (INT: its TERM is blocked). Dask's own shutdown (client.shutdown():
    # the scheduler first) leaves every worker writing to a closed connection, a
    # CommClosedError traceback in the log of a job that went well. Short: PBS kills every
    # process of the job kill_delay (10 s by default) after its TERM.
    set +e
    local pid
    if [ -n "$CLIENT_PID" ]; then
        kill -TERM "$CLIENT_PID" 2>/dev/null
        gone 4 "$CLIENT_PID" || kill -KILL "$CLIENT_PID" 2>/dev/null
        wait "$CLIENT_PID" 2>/dev/null
    fi
    if [ -s "$SCHED" ] && kill -0 "$SCHED_PID" 2>/dev/null; then
        timeout 8 "$PYTHON" -c '
import sys, distributed
from ebsdxc.cluster import stop_workers
with distributed.Client(scheduler_file=sys.argv[1], timeout="3s") as client:
    stop_workers(client, timeout=5)
' "$SCHED" >/dev/null 2>&1
        gone 2 ${LAUNCH_PIDS[@]+"${LAUNCH_PIDS[@]}"}
    fi
    for pid in ${LAUNCH_PIDS[@]+"${LAUNCH_PIDS[@]}"}; do
        kill -TERM "$pid" 2>/dev/null
    done
    [ -n "$SCHED_PID" ] && kill -INT "$SCHED_PID" 2>/dev/null
    for pid in ${LAUNCH_PIDS[@]+"${LAUNCH_PIDS[@]}"} $SCHED_PID; do
        gone 2 "$pid" || kill -KILL "$pid" 2>/dev/null
    done
    for pid in ${LAUNCH_PIDS[@]+"${LAUNCH_PIDS[@]}"} $SCHED_PID; do
        wait "$pid" 2>/dev/null
    done
    rm -f "$SCHED" "$WORKER_SH"
}
trap cleanup EXIT
# PBS's wall-time limit or qdel: one line, then cleanup (EXIT) stops the rest in order.
trap 'echo "pbs-ebsdxc.sh: cancelled (SIGTERM); stopping the client, the workers, then the scheduler" >&2
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
    kill -0 "$SCHED_PID" 2>/dev/null || { echo "pbs-ebsdxc.sh: the Dask scheduler did not start" >&2; exit 1; }
    sleep 0.5
done
[ -s "$SCHED" ] || { echo "pbs-ebsdxc.sh: no scheduler file $SCHED after 60 s" >&2; exit 1; }

# 2. On every node, one worker per GPU, each with one thread (ebsdxc builds one GPU pipeline per
#    worker thread) and its own GPU: the node script below gives worker k the k-th GPU the job
#    holds there (PBS's cgroup hook lists them in CUDA_VISIBLE_DEVICES; without it, GPU k).
#
#    Starting that node script on each node: pbsdsh (default) is part of PBS Pro itself, so it
#    needs no MPI and no ssh set-up, and what it starts belongs to the job (its GPUs and limits;
#    PBS ends it with the job). 'pbsdsh -n I' starts one copy on the node of entry I of
#    PBS_NODEFILE (entries are chunks of the select line times mpiprocs, 1 by default;
#    place=scatter puts the chunks on separate nodes). mpiexec would do the same but its options
#    and rank variables differ between MPI libraries. pbsdsh does not pass this script's
#    environment on, hence 'bash -l' (the login environment, for 'module') and ENV_SETUP run
#    again there. LAUNCHER=ssh does the same with ssh, for sites without pbsdsh that let you
#    ssh into the nodes of your own job.
cat > "$WORKER_SH" <<'NODE'
# ebsdxc: the Dask workers of one node (written and started by pbs-ebsdxc.sh)
set -eu
ENV_SETUP=$1 PYTHON=$2 SCHED=$3 GPUS=$4 THREADS=$5 DASK_INTERFACE=$6 NO_TERM=$7
eval "$ENV_SETUP"
gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
fi
iface=()
[ -n "$DASK_INTERFACE" ] && iface=(--interface "$DASK_INTERFACE")
pids=()
for ((k = 0; k < GPUS; k++)); do
    if [ "${#gpus[@]}" -gt 0 ]; then
        gpu=${gpus[$((k % ${#gpus[@]}))]}
    else
        gpu=$k
    fi
    CUDA_VISIBLE_DEVICES=$gpu "$PYTHON" -c "$NO_TERM" distributed.cli.dask_worker --scheduler-file "$SCHED" \
        --nthreads "$THREADS" --nworkers 1 --no-dashboard --resources GPU=1 \
        --name "ebsdxc-$(hostname)-$k" --local-directory "${TMPDIR:-/tmp}" --death-timeout 120 \
        ${iface[@]+"${iface[@]}"} &
    pids+=($!)
done
# PBS's TERM reaches this script too: the job script stops the workers (their TERM is blocked)
# through the scheduler, and this script ends with them; INT (by hand) stops them at once.
trap '' TERM
trap 'kill -INT "${pids[@]}" 2>/dev/null' INT
wait
NODE
wargs=("$ENV_SETUP" "$PYTHON" "$SCHED" "$GPUS_PER_NODE" "$THREADS_PER_WORKER" "$DASK_INTERFACE" "$NO_TERM")
for i in "${!NODES[@]}"; do
    if [ "$LAUNCHER" = ssh ]; then
        # ssh joins its arguments into one command line for the remote shell: quote each one.
        ssh -o BatchMode=yes "${NODES[$i]}" "$(printf '%q ' /bin/bash -l "$WORKER_SH" "${wargs[@]}")" &
    else
        pbsdsh -n "${NODE_INDEX[$i]}" -- /bin/bash -l "$WORKER_SH" "${wargs[@]}" &
    fi
    LAUNCH_PIDS+=($!)
done

# 3. Wait until every worker has joined (a worker that cannot start fails the job here).
echo "pbs-ebsdxc.sh: waiting for $NWORKERS Dask workers on ${#NODES[@]} node(s)" >&2
waited "$PYTHON" -c '
import sys, distributed
client = distributed.Client(scheduler_file=sys.argv[1], timeout="60s")
client.wait_for_workers(int(sys.argv[2]), timeout=float(sys.argv[3]))
client.close()
' "$SCHED" "$NWORKERS" "$WAIT_WORKERS_S"
ADDRESS=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' "$SCHED")
echo "pbs-ebsdxc.sh: $NWORKERS workers at $ADDRESS" >&2

# 4. The client: ebsdxc sends row tasks to the workers and writes the results file(s) here,
#    task by task.
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
