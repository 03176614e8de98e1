"""A daemon's optional Prometheus endpoint (`[metrics] listen`, `launcher_listen`), served by prometheus_client.

prometheus_client answers scrapes in its own threads; what they show comes from each daemon's collector
(`vmsched.cpumanager.exporter`, `vmsched.launcher.exporter`), registered once the daemon has its state.
The endpoint is bound before the daemon reports ready, so a bad address or a port in use stops the start.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from vmsched.config import ConfigError, parse_listen


class Endpoint:
    def __init__(self, server: WSGIServer, registry: CollectorRegistry, address: str) -> None:
        self.server = server
        self.registry = registry
        self.address = address

    def register(self, collector: Collector) -> None:
        self.registry.register(collector)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def open_endpoint(listen: str, option: str) -> Endpoint | None:
    """Listen on `listen` ('' = no endpoint). Raises ConfigError naming `option` when it cannot."""
    addr = parse_listen(listen, option)
    if addr is None:
        return None
    # Collectors are registered without describe(), so registering never runs a collection early.
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, resident memory, open fds, ...
    try:
        server, _thread = start_http_server(addr[1], addr=addr[0], registry=registry)
    except OSError as e:
        raise ConfigError(f"{option} = {listen!r}: cannot listen there: {e.strerror or e}") from None
    return Endpoint(server, registry, listen)
