"""The package as installed: one abi3 extension, a version, typed, and pandas (a dependency)
imported only by the calls that return DataFrames."""

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


def test_pandas_is_imported_only_for_dataframes(root):
    # pandas made unimportable: the problems, the anchor and the metrics work (they never load
    # it); score, which returns DataFrames, is the call that needs it.
    code = """
import sys
sys.modules["pandas"] = None
import numpy as np, uqbench
p = uqbench.Problem("experiments/e1.toml", setting={"f_main": 1})
assert p.anchor(0).mean.size == p.test_size
assert "rmse" in uqbench.metrics.regression([0.0, 1.0], [1.0, 1.0], [0.0, 0.5])
assert "pandas" not in [m for m in sys.modules if sys.modules[m] is not None]
try:
    uqbench.score(p, [{"mean": np.zeros(p.test_size), "std": np.ones(p.test_size)}])
except ImportError as e:
    print("IMPORT-ERROR:", e)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert "IMPORT-ERROR:" in out.stdout and "pandas" in out.stdout, out.stdout
    deps = importlib.metadata.requires("uqbench") or []
    assert any(r.startswith("pandas") and "extra" not in r for r in deps), deps


def test_every_public_function_and_class_is_exported():
    public = {
        name
        for name, value in vars(uqbench).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value))
        and getattr(value, "__module__", "") in ("uqbench", "uqbench._uqbench")
    }
    assert public <= set(uqbench.__all__), f"missing from uqbench.__all__: {public - set(uqbench.__all__)}"
    assert "compare" in uqbench.__all__


def _table_rows(text, header_start):
    """The body rows of the first markdown table whose header row starts with header_start."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(row)
            return lines[i], rows
    return None, []


def test_the_readme_speed_row_is_the_newest_row_of_the_machines_table(root):
    perf = (root / "docs/performance.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    head, rows = _table_rows(perf, "| date | CPU")
    assert rows, "docs/performance.md has no table of machines (| date | CPU …)"
    assert perf.index(head) < perf.index("\n## W1"), "the machines table is not the opening one"
    readme_head, readme_rows = _table_rows(readme, "| date | CPU")
    assert readme_head == head, "the README's speed table has other columns than docs/performance.md's"
    newest = max(rows, key=lambda r: r.split("|")[1].strip())
    assert readme_rows == [newest], (readme_rows, newest)
