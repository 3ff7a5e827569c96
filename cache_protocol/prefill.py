"""How a prefilled entry is marked (issue 44): its upload declares ``X-Uploader: prefill host=H pid=P
[deviceless topology=T] [unverified]``; the server keeps it with the entry, the manifest names it in the
entry's ``prefilled`` field, and ``graphs`` counts them. ``unverified``: published without a real run of the
namespace whose key components it was compared with."""

from __future__ import annotations

__all__ = ["PREFILL_UPLOADER", "UNVERIFIED", "is_prefilled", "is_unverified", "prefill_uploader"]

PREFILL_UPLOADER = "prefill"
"""The first word of a prefilled entry's ``X-Uploader``."""
UNVERIFIED = "unverified"
"""The last word of the ``X-Uploader`` of an entry prefilled unverified."""


def prefill_uploader(host: str, pid: int, topology: str | None, *, unverified: bool) -> str:
    """The ``X-Uploader`` of a prefill's uploads."""
    parts = [PREFILL_UPLOADER, f"host={host}", f"pid={pid}"]
    if topology is not None:
        parts += ["deviceless", f"topology={topology}"]
    if unverified:
        parts.append(UNVERIFIED)
    return " ".join(parts)


def is_prefilled(uploader: str | None) -> bool:
    """Whether an entry's uploader says a prefill stored it."""
    return bool(uploader) and (uploader or "").split(" ", 1)[0] == PREFILL_UPLOADER


def is_unverified(uploader: str | None) -> bool:
    """Whether a prefilled entry was published unverified."""
    return is_prefilled(uploader) and UNVERIFIED in (uploader or "").split()
