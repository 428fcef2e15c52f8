"""`python -m tileiras_async ...`: the same as the `tileiras-async` command."""
import sys

from tileiras_async.cli.batch import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m tileiras_async"))
