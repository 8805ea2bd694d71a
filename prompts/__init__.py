"""Prompts are Jinja2 files beside this module; `render(name, **vars)` is the only way in.

May import: nothing of Pivot's (Jinja2 and the standard library only).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

DIR = Path(__file__).parent


@lru_cache(maxsize=1)
def _env() -> Environment:
    return Environment(
        loader=FileSystemLoader(str(DIR)),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(name: str, **variables: Any) -> str:
    return _env().get_template(name).render(**variables)


def names() -> list[str]:
    return sorted(p.name for p in DIR.glob("*.j2"))
