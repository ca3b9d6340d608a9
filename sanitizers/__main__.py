"""``python -m sanitizers --tool memcheck``: the sanitize suite for one tool."""

from __future__ import annotations

import sys

from sanitizers.wrapper import main

sys.exit(main(sys.argv[1:]))
