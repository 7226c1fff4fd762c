"""The search's Ray session: a local Ray started for it, or a cluster it joins, and its end."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hpsearch.errors import ClusterError

__all__ = ["ray_session"]


@contextmanager
def ray_session(address: str | None) -> Iterator[dict[str, Any]]:
    """Start a local Ray (or join ``address``) for the search; shut down only what we started."""
    # Tune's default CSV/JSON/TensorBoard loggers would write every result a second time; the
    # study is the record.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Tune's newer console output prints its own tables even at verbose=0; hpsearch shows its
    # own progress, so use the classic reporter, which verbose=0 silences.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # hpsearch handles Ctrl-C itself (the study must record which trials were cut short).
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    # A trial's first report says only that its devices were reserved (the driver's STARTED_KEY);
    # Tune's strict check wants the scheduler's metric in every report and ended every ASHA search
    # on that one. The searcher records a trial that never reports its metric itself.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    import ray  # after the variables above, which Ray reads as it loads; and heavy (0.3 s)

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
        yield {"nodes": nodes}
    finally:
        if started:
            _shutdown_ray(local_head=not address)


def _shutdown_ray(*, local_head: bool) -> None:
    """End the search's Ray session: the local Ray it started (``local_head``), all of it, or its
    connection to a cluster.

    In the search's own thread, before anything else runs. It used to run in a thread of its
    own while the CLI printed its report, to hide the 1.1-1.35 s it took: then about one
    ``hpsearch resume`` in four on a short study ended with Ray's "the core worker has already
    been shutdown" and exit code 1 once the shutdown had become quicker (the main thread touched
    Ray while that thread tore it down; none in 18 runs with the shutdown in this thread, nor in
    12 with a garbage collection before it). With the autoscaler monitor stopped first it takes
    0.35 s, so it is no longer worth the race.
    """
    import ray  # loaded by ray_session already: this only names it

    if local_head:
        _stop_autoscaler_monitor()
    ray.shutdown()


def _stop_autoscaler_monitor() -> None:
    """Stop a local Ray's autoscaler monitor before the rest of it. ``ray.shutdown`` stops it
    after the GCS it reports to; asked to stop then, it tries to report once more, and Ray waits
    a second before killing it: 1.1-1.35 s of every local search's end, against 0.35 s with the
    monitor stopped first (measured on Ray 2.60, 2 cores). The monitor scales a cluster; a
    local Ray about to stop has nothing for it to do. Through Ray's private node handle (Ray
    has no public call for this): where that handle is missing, nothing is done."""
    import ray  # loaded by ray_session already: this only names it

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
