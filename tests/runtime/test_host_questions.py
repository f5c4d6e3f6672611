"""Asking every host at once, with a deadline (orchestrator.runtime.host_questions): real threads, questions
that block on events the test sets."""

from __future__ import annotations

import threading

from drivers.errors import HostUnreachable, VMNotFound
from orchestrator.runtime.host_questions import HostQuestions


def test_the_hosts_are_asked_at_once_and_answer_in_host_order():
    hosts = [f"h{i}" for i in range(12)]
    together = threading.Barrier(len(hosts), timeout=10)   # (passed only if every host is asked at the same time)

    def question(host: str) -> str:
        together.wait()
        return host.upper()

    answers = HostQuestions().ask(hosts, question, timeout_s=20)
    assert list(answers) == hosts
    assert answers == {h: h.upper() for h in hosts}


def test_an_error_is_that_hosts_answer_and_an_empty_answer_is_an_answer():
    def question(host: str) -> list[str]:
        if host == "bad":
            raise VMNotFound("no such VM")
        return []

    answers = HostQuestions().ask(["good", "bad"], question, timeout_s=5)
    assert answers["good"] == []
    assert isinstance(answers["bad"], VMNotFound)


def test_a_host_that_does_not_answer_in_time_is_silent_and_not_asked_again_until_it_answers():
    questions = HostQuestions()
    release = threading.Event()
    asked: list[str] = []

    def question(host: str) -> str:
        asked.append(host)
        if host == "mute" and not release.is_set():
            release.wait(10)
            return "late"
        return f"{host} answers"

    first = questions.ask(["a", "mute", "b"], question, timeout_s=0.3)
    assert first["a"] == "a answers" and first["b"] == "b answers"
    assert isinstance(first["mute"], HostUnreachable) and str(first["mute"]) == "no answer within 0.3 s"
    assert set(questions.open_questions()) == {"mute"}

    second = questions.ask(["a", "mute", "b"], question, timeout_s=0.3)
    assert asked.count("mute") == 1   # (its first question is still open)
    assert isinstance(second["mute"], HostUnreachable)
    assert str(second["mute"]).startswith("no answer yet to the question asked")
    assert second["a"] == "a answers"

    release.set()   # the host answers its first question: late, so that answer is kept by no one
    for _ in range(100):
        if not questions.open_questions():
            break
        threading.Event().wait(0.05)
    assert questions.open_questions() == {}
    third = questions.ask(["a", "mute", "b"], question, timeout_s=5)
    assert third["mute"] == "mute answers" and asked.count("mute") == 2


def test_hosts_that_never_answer_hold_only_their_own_workers():
    """Many silent hosts, asked first: the others still answer, at each look."""
    questions = HostQuestions()
    never = threading.Event()
    silent = [f"mute{i}" for i in range(80)]
    healthy = [f"h{i}" for i in range(5)]

    def question(host: str) -> str:
        if host.startswith("mute"):
            never.wait(30)
        return "ok"

    try:
        for _ in range(2):
            answers = questions.ask(silent + healthy, question, timeout_s=1)
            assert all(answers[h] == "ok" for h in healthy)
            assert all(isinstance(answers[h], HostUnreachable) for h in silent)
    finally:
        never.set()
