"""What one :func:`~xla_cache.warming.warm` did: :class:`WarmReport` (its counts, namespace, directory,
seconds, errors and, for an empty or thin namespace, the nearest populated ones)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from xla_cache.transfer.conversation import WarmCounts
from xla_cache.transfer.nearest import NearNamespace, nearest_line

__all__ = ["WarmReport"]


@dataclass(kw_only=True)
class WarmReport(WarmCounts):
    """What :func:`warm` did."""

    namespace: str
    framework: str
    cache_dir: str  # the directory the framework's persistent cache uses
    server: str | None
    seconds: float = 0.0  # the whole call, including importing the framework and starting its runtime
    server_seconds: float = 0.0  # the server conversation alone: what the timeout bounds
    errors: list[str] = field(default_factory=list)
    removed_entries: int = 0  # local entries the framework could not load, removed so it writes them again
    initialized: bool = False  # the framework's persistent cache points at cache_dir
    uploading: bool = False  # the background uploader runs
    following: bool = False  # the background follower fetches what other jobs store meanwhile
    feed_cursor: int | None = None  # with follow: the change feed's position before the manifest
    fingerprint: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None  # the id this run's reports carry (None: no reports, XLA_CACHE_RUN_REPORTS=0)
    # when the namespace is empty or thin: the nearest populated namespaces and how they differ
    nearest: list[NearNamespace] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def summary(self) -> str:
        """The log line; a second line when the namespace is empty or thin, naming the nearest populated
        namespace and how it differs (:func:`xla_cache.transfer.nearest.nearest_line`)."""
        text = (
            f"xla-cache warm: {self.framework} namespace {self.namespace}: {self.downloaded_entries} entries "
            f"({self.downloaded_bytes} bytes) downloaded, {self.present_entries} already present, "
            f"{self.seconds:.2f} s ({self.server_seconds:.2f} s with the server), cache dir {self.cache_dir}"
        )
        if self.unverified_entries:
            text += f", {self.unverified_entries} skipped (signed by no trusted key)"
        if self.prefilled_entries:
            text += f", {self.prefilled_entries} of the namespace's {self.manifest_entries} entries prefilled"
            if self.prefilled_unverified:
                text += f" ({self.prefilled_unverified} unverified: no real run checked their target)"
        if self.errors:
            text += f", {len(self.errors)} errors"
        if self.nearest:
            text += "\n" + nearest_line(self.manifest_entries, self.nearest)
        return text
