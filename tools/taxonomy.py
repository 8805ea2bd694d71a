"""Moved to `cards/taxonomy.py`; this name stays an alias of that module for code written before."""

import sys

from cards import taxonomy as _moved

sys.modules[__name__] = _moved
