#!/usr/bin/env bash
# The README's test command, for a fresh machine with only the Rust toolchain: installs
# lavapipe (Mesa's software Vulkan driver, so the wgpu tests really run) when no Vulkan
# driver is present, then runs the whole test suite in release mode. Extra arguments go to
# `cargo test` (e.g. `bash scripts/test.sh -- host_execution`: a test-name filter; keep
# `--workspace`, since `-p CRATE` alone changes burn's features and rebuilds it), after the house's limits
# (scripts/house-check.py); then the Slurm test
# (scripts/slurm-test.sh) and the Python package's tests. `.ci/run` calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The same build as the README's first command (cargo's default, ./target) unless
# CARGO_TARGET_DIR says otherwise (CI keeps it outside the clone): a cold release build of
# burn takes about 27 minutes on two cores, and both commands share it.
target="${CARGO_TARGET_DIR:-$PWD/target}"

if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1 && [ "${UQBENCH_SKIP_WGPU:-0}" != "1" ]; then
    echo "scripts/test.sh: no Vulkan driver; installing mesa-vulkan-drivers (lavapipe)" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            echo "scripts/test.sh: not root and no sudo: install mesa-vulkan-drivers, or set" \
                "UQBENCH_SKIP_WGPU=1 to leave the wgpu tests out deliberately" >&2
            exit 1
        fi
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mesa-vulkan-drivers
fi

# Mesa wants a writable runtime directory; without one it only warns, noisily.
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -w "${XDG_RUNTIME_DIR}" ]; then
    XDG_RUNTIME_DIR="$(mktemp -d)"
    export XDG_RUNTIME_DIR
fi

# The house's limits: no import circles, no file above 700 lines, no function above 120.
python3 scripts/house-check.py

cargo test --release --workspace "$@"

# `uqbench slurm` under a real single-node Slurm (installs Debian's Slurm and munge; needs
# root or sudo; UQBENCH_SKIP_SLURM=1 leaves it out deliberately).
if [ "${UQBENCH_SKIP_SLURM:-0}" != "1" ]; then
    UQBENCH_BIN="$target/release/uqbench" bash scripts/slurm-test.sh
fi

# The Python package (python/): its own virtual environment and target directory, so neither
# the system Python nor the workspace build is touched.
venv="${UQBENCH_VENV:-$HOME/.cache/uqbench-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
CARGO_TARGET_DIR="${UQBENCH_PYTHON_TARGET:-$HOME/.cache/uqbench-python-target}" \
    "$venv/bin/pip" install -q "./python[test,examples]"
# Run from the repository root so that `import uqbench` finds the installed package.
UQBENCH_BIN="$target/release/uqbench" "$venv/bin/pytest" -q python/tests
