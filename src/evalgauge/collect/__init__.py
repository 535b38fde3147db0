"""The collector: run a factorial of LLM judge calls into a crash-safe SQLite run database.

config (TOML) -> tasks (the factorial) -> async runner (providers, rate limits,
retries) -> store (one row per call) -> diagnostics and export. The simulated
judge server (``serve-sim``) speaks the same protocol for dry runs and tests.
"""
