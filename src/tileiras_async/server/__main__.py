"""`python -m tileiras_async.server`: the compile server (see cli/serve.py)."""
import sys

from ..cli.serve import main

sys.exit(main())
