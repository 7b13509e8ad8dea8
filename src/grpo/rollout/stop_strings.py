"""Stop strings, looked for every few tokens instead of after each one.

Text exists only on the host, so a look costs a copy of the ids and a decode per row. The
decode loop looks every ``STOP_CHECK_EVERY`` tokens (and before it ends): a row whose text
now holds a stop string is cut at the first token whose prefix held it, which is where a
look after every token would have ended it (prefixes' texts are assumed to grow, as they
do for any tokenizer that decodes a prefix to a prefix of the text). Rows decode up to
``STOP_CHECK_EVERY − 1`` tokens past their stop before the look; those are discarded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

STOP_CHECK_EVERY = 8


def first_stops(
    decode: Callable[[list[int]], str],
    tokens_BT: torch.Tensor,
    masks_BT: torch.Tensor,
    rows: list[int],
    since: int,
    stop_strings: tuple[str, ...],
) -> dict[int, int]:
    """For each of ``rows`` whose real tokens' text holds a stop string: the first position
    ≥ ``since`` whose prefix holds one (earlier prefixes were looked at before)."""
    lengths = masks_BT[rows].sum(dim=1).tolist()
    stops: dict[int, int] = {}
    for row, length in zip(rows, lengths, strict=True):
        ids = tokens_BT[row, :length].tolist()
        if not any(s in decode(ids) for s in stop_strings):
            continue
        stops[row] = next(
            (
                q
                for q in range(since, length)
                if any(s in decode(ids[: q + 1]) for s in stop_strings)
            ),
            length - 1,
        )
    return stops


def cut_after(
    stops: dict[int, int],
    pad_token_id: int,
    tokens_BT: torch.Tensor,
    logps_BT: torch.Tensor,
    masks_BT: torch.Tensor,
    stopped_B: torch.Tensor,
) -> None:
    """End each row of ``stops`` at its position: the tokens after it become padding."""
    for row, position in stops.items():
        tokens_BT[row, position + 1 :] = pad_token_id
        logps_BT[row, position + 1 :] = 0.0
        masks_BT[row, position + 1 :] = 0
        stopped_B[row] = True
