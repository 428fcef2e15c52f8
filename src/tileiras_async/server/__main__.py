"""`python -m tileiras_async.server`: the compile server (see server/cli.py)."""
import sys

from .cli import main

sys.exit(main())
