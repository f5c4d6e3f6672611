"""drivers/deadline.py: calls that may hang are waited for no longer than the deadline, all at once."""

import threading
import time

from drivers.deadline import answer_within, answers_within


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
