"""`python -m evalgauge`: the same command as `evalgauge`."""

from .cli import main

if __name__ == "__main__":
    main()
