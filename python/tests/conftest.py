"""Shared fixtures: the repository root and the `uqbench` binary the Python results are
compared with (UQBENCH_BIN, or the README's release build: under CARGO_TARGET_DIR, or the
repository's ./target)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _binary() -> Path:
    if os.environ.get("UQBENCH_BIN"):
        return Path(os.environ["UQBENCH_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return Path(target) / "release" / "uqbench"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def cli():
    binary = _binary()
    if not binary.is_file():
        raise RuntimeError(
            f"the uqbench binary {binary} is missing: build it (cargo build --release -p uqbench) "
            "or set UQBENCH_BIN"
        )

    def run(*args: str, json_out: bool = False):
        out = subprocess.run(
            [str(binary), *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise AssertionError(f"uqbench {' '.join(args)} failed: {out.stderr}")
        return json.loads(out.stdout) if json_out else out

    return run
