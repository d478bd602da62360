"""``python -m gpumon.tui.cli``: the same as ``gpumon``."""

import sys

from .launch import main

sys.exit(main())
