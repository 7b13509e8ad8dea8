import io
import time

import pytest

from grpo.log.progress import StepProgress, bar_postfix, format_duration, step_progress

METRICS = {"reward/mean": 0.5, "accuracy": 0.25, "kl": 0.0123, "time/step": 1.5}


def test_bar_postfix_has_reward_accuracy_kl_and_seconds_per_step() -> None:
    assert bar_postfix(METRICS) == "reward 0.5  acc 0.25  kl 0.0123  1.50 s/step"
    assert bar_postfix({"reward/mean": 1.0}) == "reward 1"


def test_format_duration() -> None:
    assert format_duration(65) == "01:05"
    assert format_duration(3725) == "1:02:05"


def test_eta_is_mean_seconds_per_step_times_steps_left() -> None:
    progress = StepProgress("off", total_steps=10, start_step=2)
    progress.started = time.perf_counter() - 12.0  # 3 steps (3, 4, 5) took 12 s
    assert progress.eta_seconds(5) == pytest.approx(4.0 * 5, rel=0.01)  # 5 steps left
    assert progress.eta_seconds(2) == 0.0


def test_quiet_mode_prints_a_plain_line_every_log_every_steps() -> None:
    stream = io.StringIO()
    progress = StepProgress("quiet", total_steps=5, log_every=2, stream=stream)
    for step in range(1, 6):
        progress.update(step, METRICS)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["step 2/5", "step 4/5", "step 5/5"]
    assert "\r" not in stream.getvalue()
    assert lines[0].startswith("step 2/5  reward 0.5  acc 0.25  kl 0.0123")
    assert "1.50 s/step  eta 00:0" in lines[0]


def test_bar_mode_shows_the_step_eta_and_the_numbers() -> None:
    stream = io.StringIO()
    progress = StepProgress("bar", total_steps=4, log_every=2, stream=stream)
    for step in range(1, 3):
        progress.update(step, METRICS)
    progress.close()
    text = stream.getvalue()
    assert "2/4" in text and "<" in text  # tqdm's [elapsed<remaining] is the ETA
    assert "reward 0.5  acc 0.25  kl 0.0123  1.50 s/step" in text
    assert "step 2/4  reward 0.5" in text  # the full line every log_every steps


def test_off_mode_prints_nothing() -> None:
    stream = io.StringIO()
    progress = StepProgress("off", total_steps=2, stream=stream)
    progress.update(1, METRICS)
    progress.close()
    assert stream.getvalue() == ""


@pytest.mark.parametrize(
    ("enabled", "quiet", "mode"),
    [(True, False, "bar"), (True, True, "quiet"), (False, True, "off"), (False, False, "off")],
)
def test_mode_follows_the_settings(enabled, quiet, mode) -> None:
    shown = step_progress(
        total_steps=3, start_step=0, log_every=1, enabled=enabled, quiet=quiet, terminal=True
    )
    shown.close()
    assert shown.mode == mode


@pytest.mark.parametrize(("enabled", "mode"), [(True, "quiet"), (False, "off")])
def test_off_a_terminal_the_bar_becomes_plain_lines(enabled, mode) -> None:
    # Redirected to a file, a bar's carriage-return updates would fill one huge line.
    shown = step_progress(
        total_steps=3, start_step=0, log_every=1, enabled=enabled, quiet=False, terminal=False
    )
    shown.close()
    assert shown.mode == mode
