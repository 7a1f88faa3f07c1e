#!/usr/bin/env bash
# A portable GPU check: run on a machine with a GPU and without the Rust toolchain.
#
#   bash scripts/gpu-check.sh --pack [BINARY]   # here: writes dist/uqbench-gpu-check.tar.gz
#   tar xzf uqbench-gpu-check.tar.gz && cd uqbench-gpu-check && bash gpu-check.sh ./uqbench
#
# --pack bundles BINARY (default: the README's release build, in CARGO_TARGET_DIR or
# ./target), stripped of its symbols, with this script and the specs it runs, as one gzipped
# tar (about 33 MB: it fits a 64 MiB transfer). Run with a BINARY, it prints `uqbench
# backends`, then measures `bench train --replicas 1200 --epochs 100` on wgpu and on flex,
# runs the card's `e2 --backend wgpu --profile quick` and the same on flex, and prints one
# table: the rates, the runs' wall times, and the largest |z| between the backends over every
# aggregate of E2 quick (z = the difference over √(se_wgpu² + se_flex²); the same data and
# seeds, so only the training's arithmetic differs: |z| well below 3 is agreement). Needs
# bash, awk and a Vulkan (or, in a cuda build, CUDA) driver; writes under $GPU_CHECK_OUT
# (default: a temporary directory). Exit 1 when a step fails or |z| exceeds 4.
# Smaller checks (the repository's test on lavapipe): GPU_CHECK_REPLICAS, GPU_CHECK_EPOCHS,
# GPU_CHECK_METHODS (a --methods list for E2); UQBENCH_ALLOW_SOFTWARE_GPU=1 accepts a
# software Vulkan adapter; GPU_CHECK_PACK: where --pack writes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

if [ "${1:-}" = "--pack" ]; then
    repo="$(cd "$here/.." && pwd)"
    bin="${2:-${CARGO_TARGET_DIR:-$repo/target}/release/uqbench}"
    [ -x "$bin" ] || { echo "gpu-check: $bin: no such binary (cargo build --release -p uqbench)" >&2; exit 1; }
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/uqbench-gpu-check/experiments"
    cp "$bin" "$stage/uqbench-gpu-check/uqbench"
    strip --strip-all "$stage/uqbench-gpu-check/uqbench"
    cp "$here/gpu-check.sh" "$stage/uqbench-gpu-check/"
    cp "$repo/experiments/e2.toml" "$stage/uqbench-gpu-check/experiments/"
    out="${GPU_CHECK_PACK:-$repo/dist/uqbench-gpu-check.tar.gz}"
    mkdir -p "$(dirname "$out")"
    tar -C "$stage" -czf "$out" uqbench-gpu-check
    size=$(stat -c %s "$out")
    echo "gpu-check: wrote $out ($((size / 1048576)) MiB)"
    [ "$size" -le $((64 * 1048576)) ] || { echo "gpu-check: the bundle exceeds 64 MiB" >&2; exit 1; }
    exit 0
fi

bin="${1:?usage: gpu-check.sh BINARY | --pack [BINARY]}"
[ -x "$bin" ] || { echo "gpu-check: $bin is not an executable" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
spec="$here/experiments/e2.toml"
[ -f "$spec" ] || spec="$here/../experiments/e2.toml"  # run from the repository
[ -f "$spec" ] || { echo "gpu-check: no experiments/e2.toml beside the script" >&2; exit 1; }
out="${GPU_CHECK_OUT:-$(mktemp -d)}"
mkdir -p "$out"
# A headless machine may have no runtime directory, which Vulkan loaders complain about.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$out}"

echo "== uqbench backends"
"$bin" backends

replicas="${GPU_CHECK_REPLICAS:-1200}"
epochs="${GPU_CHECK_EPOCHS:-100}"
software=()
case "${UQBENCH_ALLOW_SOFTWARE_GPU:-}" in 1 | true | yes) software=(--allow-software-gpu) ;; esac
methods=()
[ -z "${GPU_CHECK_METHODS:-}" ] || methods=(--methods "$GPU_CHECK_METHODS")
rate() { sed -n 's/.*"replica_epochs_per_s":\([0-9.]*\).*/\1/p' "$1"; }
declare -A w1 wall
for backend in wgpu flex; do
    echo "== bench train --backend $backend --replicas $replicas --epochs $epochs"
    "$bin" bench train --backend "$backend" --replicas "$replicas" --epochs "$epochs" \
        "${software[@]}" --json >"$out/w1-$backend.json"
    w1[$backend]=$(rate "$out/w1-$backend.json")
done
for backend in wgpu flex; do
    echo "== run e2 --backend $backend --profile quick"
    start=$(date +%s.%N)
    "$bin" run "$spec" --profile quick --backend "$backend" "${methods[@]}" "${software[@]}" \
        --quiet --out "$out/e2-$backend"
    wall[$backend]=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
done

# The largest |z| over the aggregates both runs have with a standard error.
worst=$(awk -F, '
    FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
        key = $col["setting"] "," $col["method"] "," $col["region"] "," $col["metric"]
        v = $col["value"]; s = $col["stderr"]
        if (v == "" || s == "" || v ~ /inf|nan/ || s ~ /inf|nan/) next
        if (FILENAME ~ /e2-wgpu/) { a[key] = v; sa[key] = s } else { b[key] = v; sb[key] = s }
    }
    END {
        best = 0; at = "none"; n = 0
        for (k in a) {
            if (!(k in b)) continue
            se = sqrt(sa[k] ^ 2 + sb[k] ^ 2)
            if (se <= 0) continue
            z = (a[k] - b[k]) / se; if (z < 0) z = -z
            n++
            if (z > best) { best = z; at = k }
        }
        printf "%.3g %d %s\n", best, n, at
    }' "$out/e2-wgpu/aggregate.csv" "$out/e2-flex/aggregate.csv")
read -r z compared where <<<"$worst"

echo
echo "| backend | W1 replica-epochs/s ($replicas × $epochs) | e2 quick wall s${methods[*]:+ (${methods[*]})} |"
echo "|---|---|---|"
for backend in wgpu flex; do
    printf "| %s | %.0f | %s |\n" "$backend" "${w1[$backend]}" "${wall[$backend]}"
done
echo
echo "largest |z| between wgpu and flex over $compared aggregates of e2 quick: $z (at $where)"
echo "results kept in $out"
awk -v z="$z" 'BEGIN { exit !(z <= 4) }' || { echo "gpu-check: |z| = $z > 4: the backends disagree" >&2; exit 1; }
