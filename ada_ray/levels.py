"""The embedded task's level grammar ("TxD": T terms of D digits) and its held-out pool size.

Shared by ada_ray.config (validation) and ada_ray.data.embedded_task (generation); imports nothing
of ada_ray, so neither imports the other for it.
"""

from __future__ import annotations

HELD_OUT_PER_LEVEL = 200  # eval prompts are a prefix of this held-out pool, never trained on


def parse_level(level: str) -> tuple[int, int]:
    """'3x2' -> (3 terms, 2 digits)."""
    parts = str(level).lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"level {level!r} is not of the form TxD (terms x digits), e.g. 2x1")
    t, d = int(parts[0]), int(parts[1])
    if not (2 <= t <= 8 and 1 <= d <= 6):
        raise ValueError(f"level {level!r}: terms must be in [2, 8] and digits in [1, 6]")
    return t, d
