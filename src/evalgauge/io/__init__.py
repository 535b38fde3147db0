"""The edge where files become a judgments table: readers by file type, importers by tool.

The numeric core (``design``, ``estimate``, ``dstudy``, ``inference``, ``compare``, ``pairwise``) takes a
:class:`evalgauge.data.Judgments` table or a data frame and never a path; everything that opens a file is
here. :func:`read_judgments` picks a reader from the file's suffix in :data:`READERS`; a new format is one
:func:`register_reader` call. :func:`import_files` turns other tools' files (Inspect, lm-eval, arena-hard,
AlpacaEval, MT-bench, wide tables) into the same table.
"""

from __future__ import annotations

from typing import Any

#: what the package offers: the readers (:mod:`evalgauge.io.readers`) and the importers' door
#: (:func:`evalgauge.io.importers.import_files`)
__all__ = ["READERS", "Reader", "import_files", "read_input", "read_judgments", "reader_for", "register_reader"]


def __getattr__(name: str) -> Any:
    """The readers load pandas, so they are imported on first use: a command that reduces files on an engine
    (:mod:`evalgauge.io.engine`) starts its scan before pandas is loaded, and loads it meanwhile."""
    if name in __all__:
        from . import importers, readers

        value = getattr(importers if name == "import_files" else readers, name)
        globals()[name] = value  # once: later lookups (and monkeypatching) see a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
