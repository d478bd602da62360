"""``python -m gpumon.tui.cli``: the same as ``gpumon``."""

import sys

from .command_line import main

sys.exit(main())
