"""`python -m tileiras_tui ...`: the same as `tileiras-async tui ...`."""
import sys

from tileiras_tui.cli import main

if __name__ == "__main__":
    sys.exit(main())
