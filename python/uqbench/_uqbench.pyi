"""Type stubs of the native module (``python/src/lib.rs``)."""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

__version__: str

class InvalidInputError(ValueError): ...
class RunDirectoryError(ValueError): ...

class Problem:
    def __init__(
        self,
        spec_path: str,
        setting: Optional[Dict[str, float]] = None,
        profile: Optional[str] = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def setting(self) -> str: ...
    @property
    def track(self) -> str: ...
    @property
    def anchor_fitted(self) -> bool: ...
    @property
    def repetitions(self) -> Optional[int]: ...
    @property
    def levels(self) -> List[float]: ...
    def repetition(self, k: int) -> Dict[str, Any]:
        """float64 arrays (``x_train``, ``y_train``, …), ``region`` a list of str."""
        ...
    def anchor(self, k: int) -> Optional[Dict[str, Any]]:
        """float64 arrays (``mean``, ``std``, ``cov``, …), ``dof`` and ``condition`` floats."""
        ...
    def score(
        self,
        predictions: List[Dict[str, npt.NDArray[np.float64]]],
        method: str,
        levels: Optional[List[float]] = None,
    ) -> Tuple[str, str, Dict[str, Any], str]: ...

def metrics(
    input: Dict[str, Any],
    bins: int = 15,
    levels: Optional[List[float]] = None,
    tace_threshold: float = 0.01,
) -> Dict[str, Any]: ...

def method_kinds() -> List[Dict[str, str]]: ...
def metric_catalogue() -> List[Dict[str, Any]]: ...

def compare(
    repetitions: Optional[str] = None,
    runs: Optional[List[str]] = None,
    metric: Optional[str] = None,
    region: Optional[str] = None,
    setting: Optional[str] = None,
    resamples: int = 10000,
    seed: int = 0,
) -> Dict[str, Any]: ...

def decide(
    problem: Problem, repetition: int, choose: Optional[Any] = None, name: str = "agent"
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]: ...
def decision_repetitions(problem: Problem) -> Optional[int]: ...
