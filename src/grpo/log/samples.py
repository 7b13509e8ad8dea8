"""The report page's sample section: the first and last logged steps' completions as a
table, or an agent run's conversations, each message in its author's style (tool results
and environment replies apart from the model's turns), the model's turns with their token
counts. Every text from the run is HTML-escaped."""

from __future__ import annotations

import html
from typing import Any

from grpo.log.conversations import message_label

SAMPLE_ROWS = 16  # completions shown per sampled step
SAMPLE_CONVERSATIONS = 8  # conversations shown per sampled step (they are long)
LEGEND = (
    "Each message is labelled and coloured by who wrote it: the model (blue), a tool "
    "(green), the environment (orange), the dataset or system prompt (grey), grpo itself "
    "reporting an environment failure (red). Token counts follow each model turn."
)
# One style per author, so that tool results and environment replies never read as the
# model's own words; an author outside this table (a newer producer) gets "other".
AUTHOR_STYLES = {
    "dataset": "background:#f4f4f4;border-color:#999",
    "system": "background:#f4f4f4;border-color:#666",
    "environment": "background:#fff4e0;border-color:#e08a00",
    "model": "background:#eaf2ff;border-color:#2f6fd6",
    "tool": "background:#e9f7ec;border-color:#2e9d4a",
    "grpo": "background:#fdeaea;border-color:#c62828",
    "other": "background:#fff;border-color:#ccc",
}
CONVERSATION_STYLE = "\n".join(
    [
        ".conversation { border: 1px solid #ccc; padding: 0.5em; margin: 0 0 1em 0; }",
        ".conversation .meta { margin: 0 0 0.4em 0; font-size: 0.85em; color: #555; }",
        ".msg { border-left: 4px solid; padding: 0.2em 0.5em; margin: 0.3em 0; }",
        ".msg .who { font-size: 0.8em; font-weight: 600; color: #444; }",
        *(f".author-{name} {{ {style} }}" for name, style in AUTHOR_STYLES.items()),
    ]
)


def _completions_table(rows: list[dict[str, Any]]) -> str:
    names = list(rows[0]["rewards"]) if rows else []
    head = "".join(
        f"<th>{html.escape(name)}</th>"
        for name in ["prompt", "completion", "reward", *names, "advantage"]
    )
    body = []
    for row in rows[:SAMPLE_ROWS]:
        numbers = [row["reward"], *(row["rewards"][name] for name in names), row["advantage"]]
        cells = [
            f"<td><pre>{html.escape(str(row[k]))}</pre></td>" for k in ("prompt", "completion")
        ]
        cells += [f'<td class="num">{value:.3g}</td>' for value in numbers]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _turn_note(turn: int, counts: list[list[int]]) -> str:
    if turn >= len(counts):
        return ""
    sampled, inserted = counts[turn]
    return f" · turn {turn + 1}: {sampled} tokens sampled, {inserted} inserted after"


def conversation_html(row: dict[str, Any]) -> str:
    """One logged conversation: its reward and advantage, the rendered prompt (folded) and
    each message in its author's style, the model's turns with their token counts. Every
    text from the run is HTML-escaped."""
    rewards = "".join(f", {name} {value:.3g}" for name, value in row.get("rewards", {}).items())
    meta = f"reward {row['reward']:.3g}{rewards} · advantage {row['advantage']:.3g}"
    parts = [f'<div class="conversation"><p class="meta">{html.escape(meta)}</p>']
    if "rendered_prompt" in row:
        parts.append(
            "<details><summary>rendered prompt (as the model read it)</summary>"
            f"<pre>{html.escape(row['rendered_prompt'])}</pre></details>"
        )
    turn, counts = 0, row.get("turn_tokens", [])
    for message in row["conversation"]:
        author = message.get("author")
        style = author if author in AUTHOR_STYLES else "other"
        label = message_label(message)
        if author == "model":
            label, turn = label + _turn_note(turn, counts), turn + 1
        parts.append(
            f'<div class="msg author-{style}"><div class="who">{html.escape(label)}</div>'
            f"<pre>{html.escape(str(message.get('content', '')))}</pre></div>"
        )
    return "".join(parts) + "</div>"


def samples_section(completions: list[dict[str, Any]]) -> str:
    """The first and last logged steps' rows: a table of completions, or for an agent run
    the conversations, each message styled by its author."""
    if not completions:
        return "<h2>Sample completions</h2>\n<p>No completions were logged " + (
            "(train.completions_every = 0).</p>"
        )
    agent = any("conversation" in row for row in completions)
    shown, noun = (SAMPLE_CONVERSATIONS, "conversations") if agent else (SAMPLE_ROWS, "completions")
    steps = sorted({row["step"] for row in completions})
    parts = [f"<h2>Sample {noun}</h2>"]
    if agent:
        parts.append(f"<p>{LEGEND}</p>")
    for step in dict.fromkeys([steps[0], steps[-1]]):
        chosen = [row for row in completions if row["step"] == step]
        parts.append(
            f"<h3>Step {step} ({len(chosen)} {noun} logged; "
            f"the first {min(shown, len(chosen))} shown)</h3>"
        )
        if agent:
            parts += [conversation_html(row) for row in chosen[:shown] if "conversation" in row]
        else:
            parts.append(_completions_table(chosen))
    return "\n".join(parts)
