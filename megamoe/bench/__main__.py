"""Entry point: ``python -m megamoe.bench`` (see ``megamoe.bench.cli``)."""

import sys

from megamoe.bench.cli import main

sys.exit(main())
