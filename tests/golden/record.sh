#!/usr/bin/env bash
# Re-record the golden run directories (tests/unit/cli/test_analyze_golden.py and others) from real runs (a few minutes on 2 cores).
# Usage: tests/golden/record.sh   (from the repository root, with the project's .venv)
set -u
cd "$(dirname "$0")/../.."
DDP=${DDPDOCTOR:-.venv/bin/ddpdoctor}
record() {  # NAME COMMAND SCRIPT [OPTIONS...]   (the script's own arguments in $SCRIPT_ARGS)
    local name=$1 cmd=$2 script=$3; shift 3
    local tmp; tmp=$(mktemp -d)
    # shellcheck disable=SC2086  # SCRIPT_ARGS is split on purpose: the script's argv
    timeout 300 "$DDP" "$cmd" --run-dir "$tmp/run" "$@" "$script" ${SCRIPT_ARGS:-} >/dev/null 2>&1
    rm -rf "tests/golden/$name"
    mkdir -p "tests/golden/$name"
    # keep the record, drop what analyze does not read (pictures, reports); torchrun's per-rank logs only
    # where KEEP_LOGS=1 (a rank's stderr is the evidence of gloo's abort)
    local logs=(! -path './logs/*')
    [ "${KEEP_LOGS:-0}" = 1 ] && logs=()
    (cd "$tmp/run" && find . -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.txt' -o -name '*.log' \) \
        ! -name 'report.json' ! -name 'trace.json' ! -name 'torchrun.log' "${logs[@]}" -print0 | \
        xargs -0 -I{} cp --parents {} "$OLDPWD/tests/golden/$name/")
    rm -rf "$tmp"
    # the run's absolute paths become relative to the repository root
    find "tests/golden/$name" -type f -exec sed -i "s#$PWD/##g" {} +
    find "tests/golden/$name" -name ledger.jsonl -exec sed -i "s/\x0//g" {} +  # the ring's padding
    echo "$name: $(du -sk "tests/golden/$name" | cut -f1) KiB"
}
record healthy check probes/healthy.py
record check_set_epoch check probes/check_set_epoch.py
record rank_conditional hang probes/rank_conditional.py
record leak_graph memleak probes/leak_graph.py
# gloo aborts rank 0 (data size mismatch): its extra all_reduce met rank 1's DDP all-reduce; rank 1 raised a
# transport error (tests/unit/analysis/hang/test_size_abort.py)
KEEP_LOGS=1 SCRIPT_ARGS="3 1" record size_abort hang tests/corpus/f22_save_branch_allreduce.py
# the same job again, now that every rank dumps torch's recorder (flight.json) at its end: the test cuts rank 1's
# dumps and its late records, as torchrun's SIGTERM can (tests/unit/analysis/hang/test_size_abort.py)
KEEP_LOGS=1 SCRIPT_ARGS="3 1" record size_abort_flight hang tests/corpus/f22_save_branch_allreduce.py
# the same job with the collectives left to torch's recorder alone (DDPDOCTOR_COLLECTIVES=recorder): gloo aborts
# rank 0 before any flight record of it is read, so its calls are unknown (tests/unit/analysis/hang/test_size_abort.py)
DDPDOCTOR_COLLECTIVES=recorder KEEP_LOGS=1 SCRIPT_ARGS="3 1" record size_abort_recorder hang tests/corpus/f22_save_branch_allreduce.py
# probes/trainer_async_save.py under the recorder and NCCL's CPU-side semantics (tests/ncclsim): rank 0's
# asynchronous extra all_reduce, then its next DDP all-reduce, are in the flight record its abort wrote (check that
# position 15 is there; plain gloo often aborts before it); the test cuts rank 1's records as torchrun's SIGTERM can
# (tests/unit/analysis/hang/test_size_abort.py)
DDPDOCTOR_TEST_NCCLSIM=1 PYTHONPATH=tests/ncclsim DDPDOCTOR_COLLECTIVES=recorder KEEP_LOGS=1 record async_abort_recorder hang probes/trainer_async_save.py
# rank 1's extra all_reduce on a second group while rank 0 waits in the default one: a cross-group deadlock
# (tests/unit/analysis/hang/test_cross_group.py)
record cross_group hang tests/frjobs/attachjob.py
# a 2-D device mesh (dp x tp) of four ranks: global rank 3 all-reduces once more on its tp group; rank 1 skips
# its dp all-reduce at one step (tests/unit/analysis/hang/test_programs.py). The job's own watchdog stays out
# of the way (FRJOB_STALL): ddpdoctor proves the deadlock
FRJOB_STALL=600 SCRIPT_ARGS="tp-extra" record mesh_tp_extra hang tests/frjobs/meshjob.py --nproc-per-node 4
FRJOB_STALL=600 SCRIPT_ARGS="dp-skip" record mesh_dp_skip hang tests/frjobs/meshjob.py --nproc-per-node 4
