"""What a stored entry's graph is: its HLO module and shapes, parsed in the background for every entry.

- :mod:`~cache_server.graphs.hlo` reads an entry's HLO module name, its parameter and result shapes and its
  source line from the entry's bytes (torch_xla and JAX layouts; no XLA schema).
- :mod:`~cache_server.graphs.worker` parses stored entries in a child process, off the server's GIL.
- :mod:`~cache_server.graphs.indexing` keeps ``entry_graphs`` filled in: its ``GraphIndexer``, a background
  thread, waits for a quiet moment, has each new or missed entry parsed and records what was found. The
  stats' top graphs read those records; the admin service starts and stops the indexer.

Nothing is imported here, so that the parser's child process loads the parser and not the whole server.
"""
