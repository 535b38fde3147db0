"""What the machine has: the memory a new allocation can have now and the cores this process may use (a leaf
module, so a reader can ask before it loads the numeric stack)."""

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


def cores() -> int:
    """The CPU cores this process may run on (its affinity where the system says, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(mmap_below: int = 32 << 20, trim_above: int = 128 << 20) -> bool:
    """Ask glibc's allocator to serve blocks below ``mmap_below`` bytes from its heap and to keep up to
    ``trim_above`` bytes freed at its top, instead of mapping each large array afresh and returning it on free:
    a REML fit allocates the same tens of megabytes at every evaluation, and the kernel zeroing fresh pages for
    each was a tenth of a command's CPU (SummEval's analysis: 3.5 s of system time, 0.4 s so). For the command
    line's own process; True when the allocator took the settings, False elsewhere (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_below)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_above))
