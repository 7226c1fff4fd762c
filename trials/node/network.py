"""What the ranks of a trial that spans nodes are told about the network.

gloo and NCCL each pick the network interface their connections go over: gloo by resolving the
machine's host name (a loopback address on many distributions), NCCL by its own rules (any
interface but loopback and container bridges). Across nodes, the one that carries the node's
address, as Ray knows it, is the one the other nodes reach; ``rank_environment`` names it for
both, unless the node's operator already did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["INTERFACE_VARIABLES", "rank_environment"]

#: The variables that pick the network interface of each collective library: set for the ranks
#: of a trial that spans nodes, unless the node's environment already sets them.
INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def rank_environment(node_ip: str, environ: Mapping[str, str] | None = None,
                     interfaces: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """What the ranks of a spanning trial on the node of ``node_ip`` are told: the network
    interface that carries that address, for gloo (``GLOO_SOCKET_IFNAME``) and NCCL
    (``NCCL_SOCKET_IFNAME``), each unless ``environ`` (the node's environment) already sets it.
    Nothing when no interface carries the address (a NAT'd address): gloo and NCCL then choose
    as they would.

    Args:
        interfaces: Interface name -> its addresses (default: this machine's, from psutil).

    Example:
        >>> rank_environment("10.0.0.5", {}, {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5"]})
        {'GLOO_SOCKET_IFNAME': 'eth0', 'NCCL_SOCKET_IFNAME': 'eth0'}
        >>> rank_environment("10.0.0.5", {"NCCL_SOCKET_IFNAME": "ib0"}, {"eth0": ["10.0.0.5"]})
        {'GLOO_SOCKET_IFNAME': 'eth0'}
        >>> rank_environment("192.0.2.1", {}, {"eth0": ["10.0.0.5"]})
        {}
    """
    environ = os.environ if environ is None else environ
    if interfaces is None:
        import psutil  # type: ignore[import-untyped]

        interfaces = {name: [a.address.split("%")[0] for a in addresses]
                      for name, addresses in psutil.net_if_addrs().items()}
    found = next((name for name, addresses in interfaces.items() if node_ip in addresses), None)
    if found is None:
        return {}
    return {name: found for name in INTERFACE_VARIABLES if not environ.get(name)}
