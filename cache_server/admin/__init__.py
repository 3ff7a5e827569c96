"""The admin side: stats, eviction, garbage collection and entry parsing. Domain code, no HTTP.

:class:`cache_server.admin.service.AdminService` is the door. Nothing is imported here, so that the graph
parser's child process (:mod:`cache_server.admin.parsing`) loads the parser and not the whole server.
"""
