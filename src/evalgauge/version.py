"""The package version, at the ground floor: every layer may read it."""

__version__ = "0.1.0"
