"""The search's Ray session: a local Ray started for it, or a cluster it joins, and its end."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray

from hpsearch.errors import ClusterError

__all__ = ["ray_session"]


@contextmanager
def ray_session(address: str | None) -> Iterator[dict[str, Any]]:
    """Start a local Ray (or join ``address``) for the search; shut down only what we started.
    Ray's environment is set before this module loads (``hpsearch.tune.orchestrator``)."""
    started = not ray.is_initialized()
    if started:
        if address:
            _check_reachable(address)
        try:
            ray.init(
                address=address or "local",
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        except ConnectionError as exc:
            if not address:
                raise
            raise ClusterError(
                f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]}. Check the "
                "address ('ray status' on the head node prints it); if the cluster uses token "
                "authentication, set RAY_AUTH_MODE=token and the cluster's RAY_AUTH_TOKEN here"
            ) from None
    try:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        yield {"alive_nodes": nodes}
    finally:
        if started:
            _shutdown_ray(local_head=not address)


def _shutdown_ray(*, local_head: bool) -> None:
    """End the search's Ray session: the local Ray it started (``local_head``), all of it, or its
    connection to a cluster. In the search's own thread, before anything else runs
    (docs/design.md, "Ray on a small machine": a shutdown in a thread of its own raced the
    main thread).
    """
    if local_head:
        _stop_autoscaler_monitor()
    ray.shutdown()


def _stop_autoscaler_monitor() -> None:
    """Stop a local Ray's autoscaler monitor before the rest of it. ``ray.shutdown`` stops it
    after the GCS it reports to; asked to stop then, it tries to report once more, and Ray waits
    a second before killing it (docs/design.md, "Ray on a small machine"). The monitor scales a
    cluster; a local Ray about to stop has nothing for it to do. Through Ray's private node
    handle (Ray has no public call for this): where that handle is missing, nothing is done."""
    node = getattr(getattr(ray, "_private", None), "worker", None)
    kill = getattr(getattr(node, "_global_node", None), "kill_monitor", None)
    if kill is None:
        return
    with contextlib.suppress(OSError, RuntimeError, TypeError):  # already gone, or other internals
        kill(check_alive=False)


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` where nothing listens: Ray itself retries for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto" and other forms: left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({exc.strerror or exc}); "
            "check the address ('ray status' on the head node prints it) and that the head node runs"
        ) from None
