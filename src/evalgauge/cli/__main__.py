"""`python -m evalgauge.cli`: the same command as `evalgauge`."""

from . import main

if __name__ == "__main__":
    main()
