#!/usr/bin/env bash
# Runs the quick profile of every spec with two uqbench binaries and compares what they write:
# every repetition file, summary, aggregate, figure and report (run.json, which records the
# build, the wall times in timings/ and timings.csv, and the logs are left out). A
# refactoring must leave the output unchanged:
#
#   bash scripts/same-results.sh /path/to/uqbench-before /path/to/uqbench-after
#
# Prints the number of files compared and every file that differs; exits 1 when one does.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
work=$(mktemp -d)
# Every spec with a quick profile (the others are studies run by hand).
specs=$(grep -l '^\[profiles\.quick\]' experiments/*.toml | xargs -n1 basename | sed 's/\.toml$//')
for side in before after; do
    bin=${!side}
    for s in $specs; do
        "$bin" run "experiments/$s.toml" --profile quick --quiet --out "$work/$side/$s" \
            >/dev/null 2>"$work/$side-$s.log" || { echo "$side: $s failed" >&2; cat "$work/$side-$s.log" >&2; exit 1; }
    done
done
files=$(cd "$work/before" && find . -type f ! -name run.json | wc -l)
if diff -rq -x run.json -x timings -x timings.csv "$work/before" "$work/after"; then
    echo "same results: $files files of $(echo $specs | wc -w) quick runs identical"
    rm -rf "$work"
else
    echo "results differ (kept in $work)" >&2
    exit 1
fi
