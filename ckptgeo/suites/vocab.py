"""The fixed vocabulary of the algorithmic tasks and the tokenizer built on it.

Every task shares one word-level vocabulary, so a multi-task mixture trains one embedding table and
every checkpoint folder carries the same tokenizer::

    id 0-3     <pad> <unk> <bos> <eos>          special tokens
    id 4-11    copy reverse compare parity add mod sort mul    task markers (first prompt token)
    id 12-17   = + * , < >                      separator, operators, comparison answers
    id 18-145  0 1 2 ... 127                    numbers; 0-9 double as digits

Numbers up to 127 are single tokens, so residues modulo any p <= 128 are one-token answers.

Text is split on whitespace only (``WhitespaceSplit``) and no special token is added around an
encoding, so ``encode(prompt + target) == encode(prompt) + encode(target)`` whenever ``target``
starts with a space (every generated target does). This is what lets a teacher-forcing scorer
tokenize ``prompt + target`` as one string and find the target's tokens at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerFast

__all__ = ["SPECIAL_TOKENS", "TASK_TOKENS", "SYMBOL_TOKENS", "MAX_NUMBER", "VOCAB", "PAD", "UNK", "BOS", "EOS",
           "SEPARATOR", "build_tokenizer", "vocab_size"]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
#: first token of each prompt, naming the task (so a mixture is unambiguous).
TASK_TOKENS = ("copy", "reverse", "compare", "parity", "add", "mod", "sort", "mul")
#: the separator that ends every prompt, operators, and the two comparison answers.
SEPARATOR = "="
SYMBOL_TOKENS = (SEPARATOR, "+", "*", ",", "<", ">")
#: numbers 0..MAX_NUMBER are single tokens.
MAX_NUMBER = 127
VOCAB: tuple[str, ...] = SPECIAL_TOKENS + TASK_TOKENS + SYMBOL_TOKENS + tuple(str(i) for i in range(MAX_NUMBER + 1))


def vocab_size() -> int:
    """Number of tokens in the task vocabulary (146)."""
    return len(VOCAB)


def build_tokenizer() -> "PreTrainedTokenizerFast":
    """Build the word-level tokenizer of the task vocabulary.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        Whitespace-split, word-level, no added special tokens on encode; ``pad_token="<pad>"``,
        ``eos_token="<eos>"``, ``bos_token="<bos>"``, ``unk_token="<unk>"``. Save it with
        ``save_pretrained(folder)`` and load it back with ``AutoTokenizer.from_pretrained(folder)``.

    Examples
    --------
    >>> tok = build_tokenizer()
    >>> tok("mod 3 + 95 =")["input_ids"]
    [9, 21, 13, 113, 12]
    >>> tok.decode([9, 21, 13, 113, 12])
    'mod 3 + 95 ='
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(VOCAB)}, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins word tokens with one space
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, unk_token=UNK, bos_token=BOS,
                                   eos_token=EOS, model_max_length=512, padding_side="right",
                                   clean_up_tokenization_spaces=False)
