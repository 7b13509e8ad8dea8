"""The generated docs pages (the configuration reference, the metrics glossary) stay complete
and up to date."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from grpo.cli.docs import (
    config_reference,
    field_docs,
    generated_pages,
    glossary_mismatches,
    metrics_glossary,
    stale_pages,
    undocumented_fields,
)
from grpo.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIG_PAGE = DOCS / "reference" / "configuration.md"
GLOSSARY_PAGE = DOCS / "reference" / "metrics.md"


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
    assert "## `[[rewards]]`" in reference
    assert (
        '| `data.answer_format` | `"plain"` \\| `"gsm8k"` \\| `"math"` | `"plain"` | reduce the '
        "`answer` column to its final answer" in reference
    )
    assert "| `algorithm.advantage_eps` | number, ≥ 0 | `0.0001` | eps in the" in reference
    assert "| `rollout.top_p` | number, in (0, 1] | `1` | nucleus sampling" in reference
    assert '| `model.lora_target_modules` | list of strings | `["all-linear"]` |' in reference


def test_the_generated_pages_are_up_to_date() -> None:
    assert stale_pages(DOCS) == [], "run: grpo docs --write docs"
    assert main(["docs", "--check", str(DOCS)]) == 0
    assert main(["docs", "--check", str(CONFIG_PAGE)]) == 0
    assert generated_pages(DOCS) == [CONFIG_PAGE, GLOSSARY_PAGE]


def test_docs_check_fails_on_a_stale_copy(tmp_path, capsys) -> None:
    for page in (CONFIG_PAGE, GLOSSARY_PAGE):
        (tmp_path / page.name).write_text(page.read_text())
    stale = tmp_path / CONFIG_PAGE.name
    stale.write_text(CONFIG_PAGE.read_text().replace("| `train.seed` |", "| `train.sead` |"))
    assert main(["docs", "--check", str(tmp_path)]) == 1
    assert "configuration.md: out of date; run grpo docs --write docs" in capsys.readouterr().err
    assert main(["docs", "--write", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{stale}: updated\n"  # the glossary was fresh
    assert stale.read_text() == CONFIG_PAGE.read_text()


def test_a_folder_without_generated_pages_is_an_error(tmp_path, capsys) -> None:
    (tmp_path / "page.md").write_text("# A page\n")
    assert main(["docs", "--check", str(tmp_path)]) == 2
    assert "no page holds a generated block" in capsys.readouterr().err


def test_the_glossary_explains_exactly_the_metric_table() -> None:
    unexplained, unknown = glossary_mismatches()
    assert unexplained == [], "add a meaning for these to grpo.log.metric_glossary"
    assert unknown == [], "grpo.log.metric_glossary explains keys the metric table lacks"
    assert "| `reward/<name>/errors` | rows whose value was substituted" in metrics_glossary()


def test_grpo_docs_prints_either_reference(capsys) -> None:
    assert main(["docs"]) == 0
    assert capsys.readouterr().out == config_reference()
    assert main(["docs", "--metrics"]) == 0
    assert capsys.readouterr().out == metrics_glossary()


def _glossary_keys() -> set[str]:
    section = GLOSSARY_PAGE.read_text()
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
    assert missing == [], (
        "add these metrics to grpo.log.metric_glossary, then: grpo docs --write docs"
    )
