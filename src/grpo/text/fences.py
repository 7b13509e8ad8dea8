"""Fenced code blocks in a model's answer (```lang … ```): what the code and proof rewards
take as the program to run."""

from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def last_fenced_block(text: str, tags: set[str]) -> str | None:
    """The last block whose tag is one of ``tags`` (any case), else the last untagged one.

    >>> answer = "```\\nuntagged\\n```\\n```Python\\nprint(1)\\n```\\n```sh\\nls\\n```"
    >>> last_fenced_block(answer, {"python", "py"})
    'print(1)\\n'
    >>> last_fenced_block(answer, {"coq"})
    'untagged\\n'
    >>> last_fenced_block("no block", {"coq"}) is None
    True
    """
    blocks = _FENCE.findall(text)
    tagged = [code for tag, code in blocks if tag.lower() in tags]
    if tagged:
        return tagged[-1]
    untagged = [code for tag, code in blocks if not tag]
    return untagged[-1] if untagged else None
