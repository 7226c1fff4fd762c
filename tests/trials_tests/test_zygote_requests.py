"""The fork requests of a node's pool are numbered once for the pool, not once per zygote: a pool
whose zygote died starts another, and a worker of the dead one still waiting for its pid (looked
up by its request number) must not be given the pid of the new zygote's child of that number."""

from __future__ import annotations

import itertools
import os

from hpsearch.trials.node.spawn import Zygote


def test_the_zygotes_of_one_pool_never_reuse_a_request_number() -> None:
    requests = itertools.count(1)  # a pool's counter
    zygotes = [Zygote([], dict(os.environ), None, requests) for _ in range(2)]
    try:
        numbers = []
        for zygote in zygotes:  # the first one died, say, and the pool started the second
            for _ in range(2):
                number, conn, printed = zygote.fork(None)
                numbers.append(number)
                conn.close()
                os.close(printed)
        assert len(set(numbers)) == len(numbers) == 4, numbers
        # Each zygote answers its own requests with its own children's pids.
        for zygote, mine in zip(zygotes, (numbers[:2], numbers[2:])):
            pids = [zygote.pid(n, 60.0) for n in mine]
            assert all(pids) and len(set(pids)) == 2
    finally:
        for zygote in zygotes:
            zygote.kill()
