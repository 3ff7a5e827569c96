"""``python -m cache_server.cli``, as ``xla-cache-server`` (and ``python -m cache_server``)."""

import sys

from cache_server.cli import main

sys.exit(main())
