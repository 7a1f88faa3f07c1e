#!/usr/bin/env bash
# `uqbench slurm` on a real Slurm: installs Debian's slurmctld, slurmd, slurm-client and munge
# when missing, writes a single-node configuration on localhost (its own ports, state and
# spool under a temporary directory, so a Slurm already on the machine is left alone), starts
# the daemons directly (no systemd), and then
#   1. runs E1's quick profile as one process (`uqbench run`);
#   2. runs it as a 3-task job array plus the merge job (`uqbench slurm --submit`), from a
#      copy of the binary and a copy of the spec, both replaced by broken ones right after
#      submitting (the jobs call the binary pinned in slurm/bin/ and read the spec pinned in
#      slurm/, so nothing changes), and checks that the merged run
#      equals the single process's, byte for byte (summaries, aggregate, report, figures,
#      every repetition file; run.json differs by design: it records the merge, and so do the
#      wall times in timings/ and timings.csv);
#   3. runs it again, cancels one array task mid-run (`scancel JOB_1`), checks that the merge
#      job left the queue (--kill-on-invalid-dep) and that `uqbench status` asks the
#      scheduler and names that task alone, runs the resubmit command status printed (not a
#      re-typed one), and checks that the resubmitted task skipped the units it had finished,
#      that every file written before the cancellation has the same bytes after, and that the
#      merged result is still identical.
# Every daemon it started (slurmctld, slurmd, and munged unless one was running) is stopped
# when it ends, pass or fail, and checked gone.
# Needs root (or sudo) for the packages and the daemons. UQBENCH_BIN: the binary to test
# (default: the README's release build, in CARGO_TARGET_DIR or ./target). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

bin="${UQBENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/uqbench}"
[ -x "$bin" ] || cargo build --release -p uqbench
spec="experiments/e1.toml"
profile="quick"

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "slurm-test: needs root (or sudo) to install and start Slurm; set" \
            "UQBENCH_SKIP_SLURM=1 to leave the Slurm test out deliberately" >&2
        exit 1
    fi
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-test: installing slurmctld slurmd slurm-client munge" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        slurmctld slurmd slurm-client munge >/dev/null
fi

work="$(mktemp -d /tmp/uqbench-slurm-test.XXXXXX)"
chmod 755 "$work"
conf="$work/etc/slurm.conf"
mkdir -p "$work/etc" "$work/state" "$work/spool" "$work/log" "$work/run"
pids=()
munged_pid=""
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do $sudo kill "$p" 2>/dev/null || true; done
    [ -z "$munged_pid" ] || $sudo kill "$munged_pid" 2>/dev/null || true
    # Gone, each of them (a daemon left running outlives the test and holds its ports).
    for p in "${pids[@]}" $munged_pid; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            echo "slurm-test: daemon $p still running after the test; killing it" >&2
            $sudo kill -9 "$p" 2>/dev/null || true
            [ $rc -ne 0 ] || rc=1
        fi
    done
    if [ $rc -ne 0 ]; then
        echo "slurm-test: FAILED (rc $rc); daemon logs:" >&2
        tail -n 30 "$work"/log/*.log >&2 || true
        echo "slurm-test: work directory kept: $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

# munge: the key comes with the package; start the daemon unless one answers.
if ! munge -n </dev/null >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || $sudo mungekey --create 2>/dev/null \
        || $sudo /usr/sbin/create-munge-key -f
    $sudo mkdir -p /run/munge
    $sudo chown munge:munge /run/munge 2>/dev/null || true
    # --force: munged refuses to run as root (or with a lax /run) otherwise.
    $sudo munged --force
    munge -n </dev/null >/dev/null
    # Ours to stop: munged daemonises and writes its pid here.
    munged_pid="$(cat /run/munge/munged.pid 2>/dev/null || pgrep -n -x munged)"
fi

host="$(hostname -s)"
cpus="$(nproc)"
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
port=$(( 17000 + RANDOM % 2000 ))
cat >"$conf" <<EOF
ClusterName=uqbenchtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=uqbench Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
export SLURM_CONF="$conf"
# -D: in the foreground (of a background job), so that the trap can stop them; -c: no state.
$sudo env SLURM_CONF="$conf" slurmctld -D -c -f "$conf" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
sleep 1
$sudo env SLURM_CONF="$conf" slurmd -D -f "$conf" -N "$host" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
    state="$(sinfo -h -n "$host" -o %T 2>/dev/null || true)"
    case "$state" in
        idle*) break ;;
        down* | drain* | unknown*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
done
grep -q '^idle' <<<"$(sinfo -h -n "$host" -o %T)" || {
    echo "slurm-test: the node never became idle (state: $(sinfo -h -o %T 2>&1))" >&2
    exit 1
}
echo "slurm-test: Slurm $(sinfo -V | awk '{print $2}') up on $host ($cpus CPUs), port $port"

# Waits until none of the given jobs is in the queue (at most 15 minutes).
wait_jobs() {
    for _ in $(seq 900); do
        if [ -z "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ]; then return 0; fi
        sleep 1
    done
    echo "slurm-test: jobs $* still queued after 15 minutes" >&2
    squeue >&2
    return 1
}
job_of() { sed -n "s/.*\"$2\": \"\\([0-9]*\\)\".*/\\1/p" "$1/slurm/slurm.json"; }
same_as_single() {
    diff -r -x run.json -x slurm -x timings -x timings.csv "$work/single" "$1" >/dev/null || {
        echo "slurm-test: $1 differs from the single-process run:" >&2
        diff -rq -x run.json -x slurm -x timings -x timings.csv "$work/single" "$1" >&2 || true
        exit 1
    }
}

# 1. One process.
t0=$(date +%s)
"$bin" run "$spec" --profile "$profile" --quiet --out "$work/single" 2>"$work/single.log"
t1=$(date +%s)
echo "slurm-test: single process: $((t1 - t0)) s"

# 2. A 3-task array and its merge, submitted by a copy of the binary that is then "rebuilt"
#    (replaced by one that fails): the jobs run the pinned copy.
mkdir -p "$work/build"
cp "$bin" "$work/build/uqbench"
cp "$spec" "$work/build/e1.toml"
"$work/build/uqbench" slurm "$work/build/e1.toml" --profile "$profile" --tasks 3 \
    --cpus-per-task 1 --time 00:30:00 --out "$work/array" --submit
printf '#!/bin/sh\necho "a rebuilt binary that must not run" >&2\nexit 3\n' >"$work/build/uqbench"
# An edit of the spec while the jobs wait: another seed (every number would change).
sed -i 's/^seed = .*/seed = 4242/' "$work/build/e1.toml"
grep -q '^seed = 4242' "$work/build/e1.toml"
pinned_sha=$(sha256sum "$work/array/slurm/bin/uqbench" | cut -d' ' -f1)
grep -q "\"binary_sha256\": \"$pinned_sha\"" "$work/array/slurm/slurm.json" || {
    echo "slurm-test: slurm.json does not record the pinned binary's checksum" >&2
    exit 1
}
array=$(job_of "$work/array" array_job)
merge=$(job_of "$work/array" merge_job)
wait_jobs "$array" "$merge"
t2=$(date +%s)
[ -f "$work/array/summary.csv" ] || {
    echo "slurm-test: the merge wrote no summary; logs:" >&2
    tail -n 20 "$work"/array/slurm/logs/* >&2
    exit 1
}
same_as_single "$work/array"
grep -q "$pinned_sha" "$work/array/slurm/parts/task-0/run.json" || {
    echo "slurm-test: task 0's run.json does not record the pinned binary" >&2
    exit 1
}
echo "slurm-test: 3-task array + merge: $((t2 - t1)) s; the pinned binary and spec ran (both edited after submission); merged run identical to the single process"

# 3. Cancel one task mid-run, resubmit it, merge: still identical.
"$bin" slurm "$spec" --profile "$profile" --tasks 3 --cpus-per-task 1 --time 00:30:00 \
    --out "$work/killed" --submit
array=$(job_of "$work/killed" array_job)
merge=$(job_of "$work/killed" merge_job)
part="$work/killed/slurm/parts/task-1"
# Wait for more files than one unit holds (E1 quick: blocks of 5 repetitions, run one after
# another with one thread), so that at least one unit is finished when the task is cancelled.
for _ in $(seq 600); do
    if [ "$(find "$part/reps" -name '*.json' 2>/dev/null | wc -l)" -ge 6 ]; then break; fi
    sleep 0.1
done
scancel "${array}_1"
# What the task had finished when it was cancelled: each file with its checksum, and the
# files of each unit with their modification times.
(cd "$part/reps" && find . -name '*.json' -exec sha256sum {} + | sort) >"$work/before.txt"
finished_before=$(wc -l <"$work/before.txt")
echo "slurm-test: cancelled task ${array}_1 with $finished_before repetition files written"
# The other tasks finish; the merge, whose dependency can no longer be met, leaves the queue.
for _ in $(seq 900); do
    [ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] && break
    sleep 1
done
[ -z "$(squeue -h -j "$merge" 2>/dev/null)" ] || {
    echo "slurm-test: merge job $merge still queued after its dependency failed" >&2
    exit 1
}
[ ! -f "$work/killed/summary.csv" ] || {
    echo "slurm-test: the merge ran although task 1 was cancelled" >&2
    exit 1
}
status="$("$bin" status "$work/killed")"
echo "$status" | tail -n 4
grep -q "to resubmit: 1$" <<<"$status" || {
    echo "slurm-test: uqbench status does not name task 1 (alone) as the one to resubmit" >&2
    exit 1
}
resubmit="$(echo "$status" | sed -n 's/^resubmit them and the merge: //p')"
[ -n "$resubmit" ] || {
    echo "slurm-test: uqbench status printed no resubmit command" >&2
    exit 1
}
echo "slurm-test: running status's command: $resubmit"
eval "$resubmit"
read -r array2 merge2 < <(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
r = m["resubmissions"][-1]
assert r["tasks"] == [1], r
print(r["array_job"], m["merge_job"])' "$work/killed/slurm/slurm.json")
wait_jobs "$array2" "$merge2"
[ -f "$work/killed/summary.csv" ] || {
    echo "slurm-test: the merge after the resubmission wrote no summary" >&2
    tail -n 20 "$work"/killed/slurm/logs/* >&2
    exit 1
}
grep -h "work units to run" "$part/../../logs/task-1.log" | sed 's/^/slurm-test: task 1: /'
# Every file written before the cancellation is still there with the same bytes (a file of
# a unit the task had not finished is recomputed on resumption, identically), and the
# resubmitted task ran fewer units than the first attempt: the finished ones were kept.
(cd "$part/reps" && find . -name '*.json' -exec sha256sum {} + | sort) >"$work/after.txt"
kept=$(comm -12 "$work/before.txt" "$work/after.txt" | wc -l)
[ "$kept" -eq "$finished_before" ] || {
    echo "slurm-test: only $kept of the $finished_before files written before the cancellation are unchanged" >&2
    comm -23 "$work/before.txt" "$work/after.txt" >&2
    exit 1
}
units=$(grep -ho "[0-9]* of [0-9]* work units to run" "$part/../../logs/task-1.log" | cut -d' ' -f1)
# Parameter expansion, not `echo | head`: under pipefail, head's early exit can end echo with
# SIGPIPE (rc 141), which failed CI on a loaded machine (2026-11-28).
first=${units%%$'\n'*}
second=${units##*$'\n'}
[ "$(printf '%s\n' "$units" | wc -l)" -eq 2 ] && [ "$second" -lt "$first" ] || {
    echo "slurm-test: the resubmitted task did not skip the finished units ($first, then $second to run)" >&2
    exit 1
}
echo "slurm-test: the resubmitted task kept its finished units ($first units to run, then $second) and its $kept files unchanged"
same_as_single "$work/killed"
echo "slurm-test: cancelled and resubmitted task resumed; merged run identical to the single process"
echo "slurm-test: OK"
