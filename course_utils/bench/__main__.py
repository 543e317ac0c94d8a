"""``python -m course_utils.bench ...``: see :mod:`course_utils.bench.cli`.

Interrupted (Ctrl-C, SIGINT, or SIGTERM), a benchmark stops with one line on stderr and exits
130 or 143; the benchmarks write no file, so nothing was written.
"""

import sys

from .. import cli
from .cli import main

cli.leaving(cli.NOTHING_WRITTEN)
sys.exit(cli.run(main, sys.argv[1:], "python -m course_utils.bench"))
