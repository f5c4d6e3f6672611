"""drivers/deadline.py: calls that may hang are waited for no longer than the deadline, all at once."""

import threading
import time

from drivers.deadline import Workers, answer_within, answers_within


def test_each_call_answers_with_its_value_its_error_or_nothing_in_time():
    release = threading.Event()

    def boom() -> int:
        raise RuntimeError("refused")

    began = time.monotonic()
    answers = answers_within({"ok": lambda: 42, "error": boom, "hung": lambda: release.wait(30)}, 0.3)
    waited = time.monotonic() - began
    release.set()
    assert list(answers) == ["ok", "error", "hung"]
    assert (answers["ok"].value, answers["ok"].error, answers["ok"].timed_out) == (42, None, False)
    assert str(answers["error"].error) == "refused" and not answers["error"].timed_out
    assert answers["hung"].timed_out and answers["hung"].value is None
    assert 0.3 <= waited < 5   # the deadline, not the hung call, decided how long we waited


def test_the_calls_run_at_once_so_the_deadline_is_for_all_of_them():
    both_running = threading.Barrier(2, timeout=5)
    answers = answers_within({"a": lambda: both_running.wait(), "b": lambda: both_running.wait()}, 5)
    assert not any(answer.timed_out or answer.error for answer in answers.values())


def test_answer_within_is_one_call():
    assert answer_within(lambda: "yes", 1).value == "yes"


def test_workers_are_reused_and_a_hung_call_holds_up_only_its_own():
    workers = Workers("test-worker")

    def one(call, timeout_s, on_late=None):
        return workers.run_all({"call": call}, timeout_s, on_late)["call"]

    first = one(threading.get_ident, 5)
    assert one(threading.get_ident, 5).value == first.value   # (the idle worker took it)
    release, late, hung_on = threading.Event(), [], []

    def hang() -> str:
        hung_on.append(threading.get_ident())
        release.wait(10)
        return "late"

    assert one(hang, 0.2, on_late=lambda name, answer: late.append((name, answer.value))).timed_out
    other = one(threading.get_ident, 5)   # (its worker is busy: another one answers at once)
    assert not other.timed_out and other.value != hung_on[0]
    assert isinstance(one(lambda: 1 / 0, 5).error, ZeroDivisionError)
    release.set()
    for _ in range(100):
        if late:
            break
        time.sleep(0.05)
    assert late == [("call", "late")]


def test_workers_run_all_calls_at_once_and_answer_in_their_order():
    names = [f"h{i}" for i in range(12)]
    together = threading.Barrier(len(names), timeout=10)   # (passed only if every call runs at the same time)

    def call(name: str) -> str:
        together.wait()
        return name.upper()

    answers = Workers("test-worker").run_all({n: (lambda n=n: call(n)) for n in reversed(names)}, 20)
    assert list(answers) == list(reversed(names))
    assert {n: a.value for n, a in answers.items()} == {n: n.upper() for n in names}


def test_calls_that_never_answer_hold_only_their_own_workers():
    """Many hung calls, started first: the others still answer in time, round after round, and the round
    ends at its deadline."""
    workers = Workers("test-worker")
    never = threading.Event()
    hung = {f"mute{i}": (lambda: never.wait(30)) for i in range(80)}
    healthy = {f"h{i}": (lambda: "ok") for i in range(5)}
    try:
        for _ in range(2):
            began = time.monotonic()
            answers = workers.run_all({**hung, **healthy}, 1)
            assert 1 <= time.monotonic() - began < 5
            assert all(answers[h].value == "ok" for h in healthy)
            assert all(answers[h].timed_out for h in hung)
    finally:
        never.set()
