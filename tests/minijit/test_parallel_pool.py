"""The shared thread pool under concurrent callers that ask for different sizes."""

import threading

from minijit import parallel


def test_concurrent_callers_growing_the_pool_all_complete():
    # each caller asks for a larger pool than the last: the pool is replaced while others submit
    errors: list[BaseException] = []
    totals = [0] * 8
    barrier = threading.Barrier(len(totals))

    def caller(i: int) -> None:
        seen = [0] * 64
        lock = threading.Lock()

        def body(begin: int, end: int) -> None:
            with lock:
                for j in range(begin, end):
                    seen[j] += 1

        try:
            barrier.wait()
            for rep in range(20):
                parallel.run_range(body, len(seen), 2 + (i + rep) % 7)
            totals[i] = sum(seen)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(totals))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert totals == [20 * 64] * len(totals)
