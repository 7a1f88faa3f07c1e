"""Type stubs of the native module (``python/src/lib.rs``)."""

from typing import Any, Dict, List, Optional, Tuple

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
    def repetitions(self) -> Optional[int]: ...
    @property
    def levels(self) -> List[float]: ...
    def repetition(self, k: int) -> Dict[str, Any]: ...
    def anchor(self, k: int) -> Optional[Dict[str, Any]]: ...
    def score(
        self,
        predictions: List[Dict[str, Any]],
        method: str,
        levels: Optional[List[float]] = None,
    ) -> Tuple[str, str, str]: ...

def metrics(
    input_json: str,
    bins: int = 15,
    levels: Optional[List[float]] = None,
    tace_threshold: float = 0.01,
) -> str: ...
