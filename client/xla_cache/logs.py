"""The client's one logger (``xla_cache``), whose lines never carry a terminal escape sequence.

A job's log shows text that other clients sent the server (a namespace's fingerprint values in the nearest
namespaces' explanation, a graph's module name, a run's host) and text the server itself sends. Whatever it
is, each control, format or separator character in a logged line is written as ``\\u009b``
(:func:`cache_protocol.text.shown`): the lines of a message stay lines, nothing else reaches the terminal raw.
"""

from __future__ import annotations

import logging

from cache_protocol.text import shown

__all__ = ["PrintableLines", "logger"]


class PrintableLines(logging.Filter):
    """Rewrites a record's message, its arguments filled in, with every line escaped by ``shown``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = "\n".join(shown(line) for line in message.split("\n"))
        if escaped != message or record.args:
            record.msg, record.args = escaped, None
        return True


logger = logging.getLogger("xla_cache")
if not any(isinstance(f, PrintableLines) for f in logger.filters):
    logger.addFilter(PrintableLines())
