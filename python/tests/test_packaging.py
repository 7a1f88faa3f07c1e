"""The package as installed: one abi3 extension, a version, typed, and pandas needed only by
the calls that return DataFrames."""

import ast
import importlib.metadata
import inspect
import os
import subprocess
import sys
from pathlib import Path

import uqbench
from uqbench import _uqbench


def test_version_matches_the_metadata_and_the_project(root):
    assert uqbench.__version__ == importlib.metadata.version("uqbench")
    pyproject = (root / "python/pyproject.toml").read_text()
    assert f'version = "{uqbench.__version__}"' in pyproject


def test_one_abi3_extension_and_the_typing_files():
    package = Path(uqbench.__file__).parent
    native = Path(_uqbench.__file__).name
    assert native.startswith("_uqbench.abi3."), f"{native}: not an abi3 (stable-ABI) build"
    assert (package / "py.typed").is_file()
    assert (package / "_uqbench.pyi").is_file()


def test_the_stubs_cover_the_native_module():
    stub = ast.parse((Path(uqbench.__file__).parent / "_uqbench.pyi").read_text())
    stubbed = {n.name for n in stub.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stubbed |= {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(_uqbench) if not n.startswith("_") or n == "__version__"}
    assert public <= stubbed, f"missing from _uqbench.pyi: {public - stubbed}"
    methods = {n.name for c in stub.body if isinstance(c, ast.ClassDef) for n in c.body if isinstance(n, ast.FunctionDef)}
    native = {n for n, _ in inspect.getmembers(_uqbench.Problem) if not n.startswith("_")}
    assert native <= methods, f"Problem members missing from the stubs: {native - methods}"


def test_pandas_is_needed_only_for_dataframes(root):
    # pandas made unimportable: the problems, the anchor and the metrics work; score says what
    # to install.
    code = """
import sys
sys.modules["pandas"] = None
import numpy as np, uqbench
p = uqbench.Problem("experiments/e1.toml", setting={"f_main": 1})
assert p.anchor(0).mean.size == p.test_size
assert "rmse" in uqbench.metrics.regression([0.0, 1.0], [1.0, 1.0], [0.0, 0.5])
try:
    uqbench.score(p, [{"mean": np.zeros(p.test_size), "std": np.ones(p.test_size)}])
except ImportError as e:
    print("IMPORT-ERROR:", e)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert "IMPORT-ERROR: uqbench.score, uqbench.evaluate and uqbench.read_run return pandas DataFrames" in out.stdout
    assert "pip install 'uqbench[pandas]'" in out.stdout
