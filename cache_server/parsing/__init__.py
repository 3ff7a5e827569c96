"""Parsing the stored entries: a service of its own, built in wiring and notified by every upload.

- :mod:`~cache_server.parsing.hlo` reads an entry's HLO module name, its parameter and result shapes and its
  source line from the entry's bytes (torch_xla and JAX layouts, TPU executables through
  :mod:`~cache_server.parsing.tpu`; no XLA schema: :mod:`~cache_server.parsing.wire` and
  :mod:`~cache_server.parsing.schema`), and :mod:`~cache_server.parsing.instructions` walks its instructions
  into a :class:`~cache_server.parsing.body.Body`.
- :mod:`~cache_server.parsing.worker` parses stored entries in a child process, off the server's GIL.
- :mod:`~cache_server.parsing.service` keeps ``entry_graphs`` filled in: its ``ParsingService``, a background
  thread over the index's ``GraphRepository``, waits for a quiet moment, has each new or missed entry parsed
  and records what was found. The stats, the bucketing report (:mod:`cache_server.graphs`) and the miss
  reasons read those records.

Nothing is imported here, so that the parser's child process loads the parser and not the whole server.
"""
