# uqbench recipes; `just --list` shows them with their documentation.
# Arguments after a recipe name go through to `uqbench run`, e.g.
#   just e2 --backend wgpu --profile paper

# The README's build: cargo's own target directory (./target, or CARGO_TARGET_DIR when set),
# so that `just e1` reuses what the README's first command built (scripts/house-check.py
# holds every documented command to it).

uqbench := "cargo run --release -q -p uqbench --"

# List the recipes.
[group('help')]
default:
    @just --list

# Run experiment E1 of [000] (sinusoids, sweep over f_main).
[group('experiments')]
e1 *ARGS:
    {{uqbench}} run experiments/e1.toml {{ARGS}}

# Run experiment E2 of [000] (Styblinski–Tang, sweep over the dimension d).
[group('experiments')]
e2 *ARGS:
    {{uqbench}} run experiments/e2.toml {{ARGS}}

# Run experiment E3 of [000] (2-D quadratic, heat maps over a grid).
[group('experiments')]
e3 *ARGS:
    {{uqbench}} run experiments/e3.toml {{ARGS}}

# Run the tests, in release mode so they reuse the release build of burn.
[group('dev')]
test *ARGS:
    cargo test --release --workspace {{ARGS}}

# Measure batched training throughput (extra arguments go to `uqbench bench train`).
[group('dev')]
bench *ARGS:
    {{uqbench}} bench train {{ARGS}}

# What CI runs (.ci/run = scripts/test.sh): house check, Rust tests, Slurm test, Python tests.
[group('dev')]
ci:
    bash scripts/test.sh

# Formatting and clippy with warnings as errors.
[group('dev')]
lint:
    cargo fmt --all --check
    cargo clippy --release --workspace --all-targets -- -D warnings

# Build the Python package into the current environment.
[group('dev')]
python:
    pip install ./python
