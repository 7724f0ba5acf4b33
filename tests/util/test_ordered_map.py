"""A map run a few calls ahead on threads: results in order, bounded, errors in place, and
closing early leaves no thread."""

import random
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from arrow_gpu._util.ordered_map import OrderedMap


class Tracked:
    """A function that sleeps a little and records how many of its calls run at once."""

    def __init__(self, fail_at=None):
        self.lock = threading.Lock()
        self.running = self.most_running = 0
        self.started = []
        self.fail_at = fail_at

    def __call__(self, item):
        with self.lock:
            self.started.append(item)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            time.sleep(random.random() * 0.002)
            if item == self.fail_at:
                raise KeyError(f"item {item} is bad")
            return item * 10
        finally:
            with self.lock:
                self.running -= 1


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 12), st.integers(1, 4))
def test_results_come_in_order_with_at_most_workers_calls_running(count, workers):
    threads = threading.active_count()
    function = Tracked()
    results = list(OrderedMap(function, range(count), workers=workers, name="arrow_gpu test"))
    assert results == [item * 10 for item in range(count)]
    assert function.most_running <= workers
    assert threading.active_count() == threads  # the end of the items ends the threads


def test_calls_start_no_further_ahead_than_the_workers():
    function = Tracked()
    with OrderedMap(function, range(100), workers=3, name="arrow_gpu test") as results:
        assert function.started == []  # nothing runs before the first read
        assert next(results) == 0
        time.sleep(0.05)
        assert len(function.started) <= 1 + 3  # the one handed over, three in flight


def test_an_error_is_raised_after_the_results_before_it():
    threads = threading.active_count()
    results = OrderedMap(Tracked(fail_at=3), range(10), workers=2, name="arrow_gpu test")
    got = []
    with pytest.raises(KeyError, match="item 3 is bad"):
        for result in results:
            got.append(result)
    assert got == [0, 10, 20]
    assert threading.active_count() == threads
    with pytest.raises(StopIteration):
        next(results)  # then the map is over


def test_an_error_of_the_items_comes_after_the_calls_before_it():
    def items():
        yield from range(3)
        raise OSError("the listing broke")

    results = OrderedMap(Tracked(), items(), workers=2, name="arrow_gpu test")
    got = []
    with pytest.raises(OSError, match="listing broke"):
        for result in results:
            got.append(result)
    assert got == [0, 10, 20]


def test_closing_early_cancels_waits_and_leaves_no_thread():
    threads = threading.active_count()
    function = Tracked()
    results = OrderedMap(function, range(1000), workers=4, name="arrow_gpu test")
    next(results)
    results.close()
    assert function.running == 0  # the running calls were waited for
    assert len(function.started) <= 1 + 4
    assert threading.active_count() == threads
    with pytest.raises(StopIteration):
        next(results)
    results.close()  # twice is fine
    OrderedMap(function, range(3), workers=2, name="arrow_gpu test").close()  # never read


def test_workers_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        OrderedMap(abs, [1], workers=0, name="arrow_gpu test")


def test_calls_ahead_of_a_slow_one_keep_the_threads_busy():
    """With ``ahead`` above ``workers``, the calls after a slow one run meanwhile (here the
    slow call waits for the third to start: with ``ahead == workers`` it would wait for
    ever), still no more than ``ahead`` past the consumer and ``workers`` at once."""
    third_started = threading.Event()
    function = Tracked()

    def slow_first(item):
        if item == 0 and not third_started.wait(timeout=10):
            raise TimeoutError("the third call never started")
        if item == 2:
            third_started.set()
        return function(item)

    with OrderedMap(slow_first, range(20), workers=2, name="arrow_gpu test",
                    ahead=4) as results:
        assert next(results) == 0
        time.sleep(0.05)
        assert len(function.started) <= 1 + 4
        assert list(results) == [item * 10 for item in range(1, 20)]
    assert function.most_running <= 2


def test_ahead_must_cover_the_workers():
    with pytest.raises(ValueError, match="ahead must be at least workers"):
        OrderedMap(abs, [1], workers=3, name="arrow_gpu test", ahead=2)
