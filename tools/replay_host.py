"""Moved to `cards/replay.py`; this name stays an alias of that module for code written before."""

import sys

from cards import replay as _moved

sys.modules[__name__] = _moved
