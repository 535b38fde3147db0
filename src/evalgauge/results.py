"""What every result shares: one JSON sanitiser and the ``to_dict`` / ``to_json`` / ``to_frame`` trio.

Pure (no I/O): results of the numeric core and of the report serialise the same way, and no output is
invalid JSON (``NaN`` is not JSON; it becomes ``null``).
"""

from __future__ import annotations

import json
import math
from typing import Any


class Result:
    """A typed result: ``to_dict()`` (JSON-ready through :func:`json_safe`), ``to_json()``, ``to_frame()``."""

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def to_frame(self):
        """One tidy row per quantity (a one-row frame for a scalar result)."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])


def json_safe(value: Any) -> Any:
    """The one JSON sanitiser: NaN and infinities become null, numpy scalars and arrays plain Python.

    Every JSON evalgauge writes goes through here, so no output is invalid JSON (``NaN`` is not JSON).
    """
    import numpy as np

    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def dumps(payload: Any, indent: int | None = 2) -> str:
    return json.dumps(json_safe(payload), indent=indent, allow_nan=False)
