#!/usr/bin/env bash
# Re-record the golden run directories of tests/test_golden.py from the probes (a few minutes on 2 cores).
# Usage: tests/golden/record.sh   (from the repository root, with the project's .venv)
set -u
cd "$(dirname "$0")/../.."
DDP=${DDPDOCTOR:-.venv/bin/ddpdoctor}
record() {  # NAME COMMAND PROBE [OPTIONS...]
    local name=$1 cmd=$2 probe=$3; shift 3
    local tmp; tmp=$(mktemp -d)
    timeout 300 "$DDP" "$cmd" --run-dir "$tmp/run" "$@" "probes/$probe" >/dev/null 2>&1
    rm -rf "tests/golden/$name"
    mkdir -p "tests/golden/$name"
    # keep the record, drop what analyze does not read (logs, pictures, reports)
    (cd "$tmp/run" && find . -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.txt' \) \
        ! -name 'report.json' ! -name 'trace.json' ! -path './logs/*' -print0 | \
        xargs -0 -I{} cp --parents {} "$OLDPWD/tests/golden/$name/")
    rm -rf "$tmp"
    # the run's absolute paths become relative to the repository root
    find "tests/golden/$name" -type f -exec sed -i "s#$PWD/##g" {} +
    echo "$name: $(du -sk "tests/golden/$name" | cut -f1) KiB"
}
record healthy check healthy.py
record check_set_epoch check check_set_epoch.py
record rank_conditional hang rank_conditional.py
record leak_graph memleak leak_graph.py
