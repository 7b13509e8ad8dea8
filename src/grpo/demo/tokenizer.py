"""A character-level tokenizer for the embedded task, built locally with `tokenizers`."""

from __future__ import annotations

from pathlib import Path

ALPHABET = list("0123456789+-*=() ?:abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!'\n")
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]


def build_char_tokenizer(directory: str | Path | None = None, alphabet: list[str] | None = None):
    """One token per character (of ``alphabet``, default :data:`ALPHABET`); saved in
    Hugging Face format when ``directory`` is given."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + (alphabet or ALPHABET))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    if directory is not None:
        tokenizer.save_pretrained(str(directory))
    return tokenizer
