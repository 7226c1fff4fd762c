"""The study page's API times at 100 and 10,000 trials, measured side by side in one run.

The dashboard's WSGI app is called in process (no network in the numbers) on SQLite studies
written by ``hpsearch.dashboards.synthetic``. For each endpoint the study page calls, it reports
the median of several calls:

- *cold*: the first call of a fresh dashboard process (reads every trial from the store);
- *warm*: a poll while nothing changed (what a page open on a study costs every 5 s).

and the ratio of the 10,000-trial time to the 100-trial time: 100 for a cost linear in the
number of trials, near 1 for one that does not grow with it.

    python benchmarks/dashboard_api.py                 # 100 and 10,000 trials
    python benchmarks/dashboard_api.py --sizes 100 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

ENDPOINTS = {
    "study summary": "/api/studies/bench",
    "table page 1": "/api/studies/bench/trials?limit=50",
    "table sorted": "/api/studies/bench/trials?limit=50&sort=-val_accuracy",
    "table filtered": "/api/studies/bench/trials?limit=50&q=linear&state=COMPLETE",
    "frontier figure": "/api/studies/bench/figures/frontier",
    "study list": "/api/studies",
    "trial page": "/api/studies/bench/trials/7",
}


def call(app: Callable[..., Any], url: str) -> int:
    path, _, query = url.partition("?")
    environ: dict[str, Any] = {"PATH_INFO": path, "QUERY_STRING": query}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h: status.append(s)))
    if not status[0].startswith("200"):
        raise SystemExit(f"{url}: {status[0]} {body[:300]!r}")
    return len(body)


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(n_trials: int, folder: Path, repeat: int) -> dict[str, tuple[float, float, int]]:
    from hpsearch.dashboards.app import DashboardApp
    from hpsearch.dashboards.synthetic import synthetic_study

    url = f"sqlite:///{folder / f'bench-{n_trials}.db'}"
    start = time.perf_counter()
    synthetic_study(url, "bench", n_trials=n_trials, seed=0)
    print(f"  wrote {n_trials} trials in {time.perf_counter() - start:.1f} s")
    out = {}
    for name, endpoint in ENDPOINTS.items():
        # Cold: a fresh app (and a fresh read of the store) for every call.
        cold = timed(lambda: call(DashboardApp(url), endpoint), max(1, repeat // 2))
        app = DashboardApp(url)
        size = call(app, endpoint)
        warm = timed(lambda: call(app, endpoint), repeat)
        out[name] = (cold, warm, size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for n in args.sizes:
            print(f"{n} trials:")
            results[n] = measure(n, Path(folder), args.repeat)
    small, large = args.sizes[0], args.sizes[-1]
    print()
    print(f"{'endpoint':<16} {'cold ' + str(small):>10} {'cold ' + str(large):>11} {'ratio':>6}   "
          f"{'warm ' + str(small):>10} {'warm ' + str(large):>11} {'ratio':>6}   {'bytes ' + str(large):>12}")
    for name in ENDPOINTS:
        c0, w0, _ = results[small][name]
        c1, w1, size = results[large][name]
        print(f"{name:<16} {c0 * 1e3:>8.1f}ms {c1 * 1e3:>9.1f}ms {c1 / c0:>6.1f}   "
              f"{w0 * 1e3:>8.1f}ms {w1 * 1e3:>9.1f}ms {w1 / w0:>6.1f}   {size:>12,}")


if __name__ == "__main__":
    main()
