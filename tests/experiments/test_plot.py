"""`sweep plot`'s figure says what it shows in words: axes with their units, a title that fits the image."""

from __future__ import annotations

import pytest

from orchestrator.experiments.plot import Line, label_of, sweep_figure

LINES = [Line("all", [5, 10, 15], [1.0, 2.0, 3.0], [0.5, 1.0, 2.0], [2.0, 3.0, 4.0], [12, 12, 12]),
         Line("none", [5, 10, 15], [2.0, 4.0, 8.0], [1.0, 2.0, 3.0], [3.0, 5.0, 9.0], [12, 12, 12])]


def _texts(fig) -> dict[str, object]:
    from matplotlib.text import Text

    return {t.get_text(): t for t in fig.findobj(Text) if t.get_text()}


@pytest.mark.parametrize(("column", "label"), [
    ("be_wait_mean_seconds", "best-effort mean wait (s)"),
    ("utilization", "CPU utilization (fraction of the hosts' CPUs)"),
    ("predicted_downtime_ms_total", "predicted downtime, all migrations (ms)"),
    ("max_downtime_ms", "max downtime (ms)"),
    ("bandwidth_mib_s", "bandwidth (MiB/s)"),
    ("suspension", "suspension"),
    ("preemption_mode", "preemption mode"),
])
def test_a_column_is_named_in_words_with_its_unit(column, label):
    assert label_of(column) == label


def test_the_axes_say_what_they_show_and_the_title_fits_the_image():
    fig = sweep_figure(LINES, "work", "be_wait_mean_seconds", "suspension")
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("work", "best-effort mean wait (s)")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [title] = [t for text, t in _texts(fig).items() if text.startswith("Best-effort mean wait (s) by work")]
    assert " ".join(title.get_text().split()) == ("Best-effort mean wait (s) by work, one line per suspension "
                                                  "(72 runs; each point their mean, the band their range)")
    box, frame = title.get_window_extent(renderer), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)


def test_labels_given_in_words_are_used():
    fig = sweep_figure(LINES, "work", "be_wait_mean_seconds", None, x_label="advance reservations (% of the work)",
                       y_label="mean wait (s)")
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("advance reservations (% of the work)", "mean wait (s)")
    assert any(text.startswith("Mean wait (s) by advance reservations (% of the work)") for text in _texts(fig))
