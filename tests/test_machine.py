"""What the machine has and how the command line asks its allocator to behave (evalgauge.machine)."""

import platform

from evalgauge import machine


def test_cores_are_at_least_one():
    assert machine.cores() >= 1


def test_the_allocator_keeps_freed_memory_on_glibc():
    """On glibc (Linux) mallopt takes both settings; elsewhere the call is a no-op that says so."""
    took = machine.keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert took is True
    else:
        assert took is False
