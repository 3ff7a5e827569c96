"""The admin side: stats, eviction, garbage collection and packing. Domain code, no HTTP.

:class:`cache_server.admin.service.AdminService` is the door; it runs the graph parser
(:mod:`cache_server.graphs`) in the background for the stats' top graphs.
"""
