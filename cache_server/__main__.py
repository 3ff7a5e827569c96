"""Entry point of ``xla-cache-server`` (and ``python -m cache_server``).

The server's dependencies are the ``server`` extra; a training host that installed only the client gets
a sentence saying what to install instead of an import traceback.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    try:
        from cache_server.cli import main as cli_main
    except ModuleNotFoundError as exc:
        print(
            f"error: the server's dependencies are not installed ({exc.name} is missing); "
            "install this package with its server extra, from a checkout "
            "(pip install '/path/to/checkout[server]') or from a wheel built from one "
            "(pip install 'xla_compile_cache-<version>-py3-none-any.whl[server]')",
            file=sys.stderr,
        )
        return 2
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
