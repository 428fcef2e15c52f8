"""`python -m tui ...`: the same as `tileiras-async tui ...`."""
import sys

from tui.cli import main

if __name__ == "__main__":
    sys.exit(main())
