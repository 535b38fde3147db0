"""What the machine has: the memory a new allocation can have now (a leaf module, so a reader can ask before it
loads the numeric stack)."""

from __future__ import annotations

import os


def available_memory() -> int | None:
    """Bytes of memory a new allocation can have now: Linux's MemAvailable (free memory plus the page cache
    it can reclaim; the free pages alone understate it on a machine that has read large files), else the
    free physical pages, or None where the system does not say."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platforms without these names
        return None
