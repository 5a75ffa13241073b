"""Run independent blocks of work on every core.

numpy runs element-wise kernels (exp, max, sum) on one core, but releases the GIL inside them, so a thread pool over
independent blocks of query rows keeps every core busy. Inside the pool each BLAS call must use one thread: two pool
threads each starting a multi-threaded matmul would fight over the same cores. threadpoolctl (a small, optional
dependency) sets that limit; without it the blocks run one after another and BLAS parallelises the matmuls alone.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from ._checks import positive_int

# Below this many score elements a pool costs more than it saves (and small notebook examples stay single-threaded).
MIN_PARALLEL_ELEMENTS = 1 << 20
# Scores per block of query rows: 2^18 float32 = 1 MiB, about what a core's L2 cache holds (measured best here).
ROW_BLOCK_ELEMENTS = 1 << 18

_pool: ThreadPoolExecutor | None = None
_blas = None
_limit: int | None = None  # set by limit_threads


def workers() -> int:
    """Threads to use: the cores this process may run on, or fewer inside :func:`limit_threads`."""
    if _limit is not None:
        return _limit
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _blas_controller():
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas = False
        else:
            _blas = ThreadpoolController()
    return _blas


def run_blocks(fn, blocks: list, elements: int) -> list:
    """``[fn(*b) for b in blocks]``, on a thread pool when there is enough work (``elements`` scores) and cores."""
    global _pool
    blas = _blas_controller() if elements >= MIN_PARALLEL_ELEMENTS and len(blocks) > 1 and workers() > 1 else False
    if not blas:
        return [fn(*b) for b in blocks]
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="attnlab")
    with blas.limit(limits=1, user_api="blas"):  # one BLAS thread per pool thread
        return list(_pool.map(lambda b: fn(*b), blocks))


@contextmanager
def limit_threads(n: int):
    """Inside the ``with`` block, run attnlab's blocks on at most ``n`` threads (``n = 1``: one after another).

    For timings: a sweep over sizes otherwise switches from one core to all of them at ``MIN_PARALLEL_ELEMENTS``
    scores, which bends the measured growth. BLAS's own threads are limited to ``n`` too while the block runs, when
    threadpoolctl is installed. Not thread-safe: it changes a module-wide setting.

    Examples
    --------
    >>> with limit_threads(1):
    ...     workers()
    1
    """
    global _limit
    n = positive_int(n, "n")
    previous, _limit = _limit, min(n, workers())
    blas = _blas_controller()
    try:
        if blas:
            with blas.limit(limits=_limit, user_api="blas"):
                yield
        else:
            yield
    finally:
        _limit = previous
