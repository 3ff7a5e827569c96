"""What the parsed graphs say: the shapes recorded, which sizes vary between a graph's variants (on named
axes, or baked into its ops), and what bucketing would save (:mod:`~cache_server.graphs.report`, the one
door).

The graphs are parsed by the parsing service (:mod:`cache_server.parsing`), which stands below this room.
"""
