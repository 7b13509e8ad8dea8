"""The README's generated configuration reference and its metrics glossary stay complete."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from grpo.cli.docs import config_reference, field_docs, undocumented_fields, with_reference
from grpo.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


@dataclass(frozen=True)
class Example:
    """An example section."""

    plain: int = 1
    trailing: str = "x"  # the comment at the end of the line
    # the lines right above,
    # joined
    above: float = 0.5  # and then the end of the line
    undocumented: bool = False


def test_field_docs_are_the_comments_above_and_at_the_end_of_the_line() -> None:
    assert field_docs(Example) == {
        "plain": "",
        "trailing": "the comment at the end of the line",
        "above": "the lines right above, joined and then the end of the line",
        "undocumented": "",
    }


def test_every_config_key_is_documented() -> None:
    assert undocumented_fields() == [], (
        "add a comment to these fields in src/grpo/config/sections.py"
    )


def test_reference_rows_are_built_from_types_defaults_and_comments() -> None:
    reference = config_reference()
    assert "#### `[[rewards]]`" in reference
    assert (
        '| `data.answer_format` | `"plain"` \\| `"gsm8k"` \\| `"math"` | `"plain"` | reduce the '
        "`answer` column to its final answer" in reference
    )
    assert "| `algorithm.advantage_eps` | number | `0.0001` | eps in the" in reference
    assert '| `model.lora_target_modules` | list of strings | `["all-linear"]` |' in reference


def test_readme_reference_is_up_to_date() -> None:
    readme = README.read_text()
    assert with_reference(readme) == readme, "run: grpo docs --write README.md"
    assert main(["docs", "--check", str(README)]) == 0


def test_docs_check_fails_on_a_stale_copy(tmp_path, capsys) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(README.read_text().replace("| `train.seed` |", "| `train.sead` |"))
    assert main(["docs", "--check", str(stale)]) == 1
    assert "out of date; run grpo docs --write" in capsys.readouterr().err
    assert main(["docs", "--write", str(stale)]) == 0
    assert stale.read_text() == README.read_text()


def _glossary_keys() -> set[str]:
    section = README.read_text().split("## Metrics glossary", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def test_every_logged_metric_is_in_the_glossary(trained_run_dir) -> None:
    rows = [
        json.loads(line) for line in (trained_run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    names = ("numeric_answer", "digit_fraction")  # the run's reward functions
    logged = {
        re.sub(rf"^reward/({'|'.join(names)})/", "reward/<name>/", key)
        for row in rows
        for key in row
    }
    assert {"kl", "loss", "grad_norm", "eval/accuracy", "accuracy"} <= logged  # a full run
    missing = sorted(logged - _glossary_keys())
    assert missing == [], "add these metrics to the README's Metrics glossary"
