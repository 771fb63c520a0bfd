"""Text cleaners of the shipped task files (see ../shared/data/README.md), by the name a
task declares in its `clean` field.

Example:
    >>> CLEANERS["ptb"]("a -LRB- small -RRB- film")
    'a ( small ) film'
"""

from __future__ import annotations

from typing import Callable

_PTB_REPLACEMENTS = (
    ("-LRB-", "("), ("-RRB-", ")"), ("-LSB-", "["), ("-RSB-", "]"),
    ("\\/", "/"), ("\\*", "*"), ("``", '"'), ("''", '"'),
)


def clean_ptb(text: str) -> str:
    """Undoes the Penn Treebank escapes of the SST sentences (`-LRB-` -> `(`).

    >>> clean_ptb("a -LRB- small -RRB- film")
    'a ( small ) film'
    """
    for escaped, plain in _PTB_REPLACEMENTS:
        text = text.replace(escaped, plain)
    return text


def unquote_twice_quoted(text: str) -> str:
    """Second CSV unquoting for Quora fields that were quoted twice.

    Text that is not a whole quoted string (including the damaged rows' open quotes) is
    returned unchanged.

    >>> unquote_twice_quoted('"What does ""69"" mean?"')
    'What does "69" mean?'
    """
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        inner = text[1:-1]
        if '"' not in inner.replace('""', ""):
            return inner.replace('""', '"')
    return text


def clean_review(text: str) -> str:
    """CFIMDB reviews: HTML line breaks to spaces; reviews with quotes were escaped more
    than once (a `\"\"\"` wrapper, each quote mark doubled), so they are unescaped.

    >>> clean_review('\"\"\" a \"\" \"\" fine \"\" \"\" film .<br /><br />Go . \"\"\"')
    'a " fine " film . Go .'
    """
    text = text.replace("<br />", " ").strip()
    if len(text) >= 6 and text.startswith('"""') and text.endswith('"""'):
        text = text[3:-3]
    return " ".join(text.replace('"" ""', '"').replace('""', '"').split())


CLEANERS: dict[str, Callable[[str], str]] = {
    "": lambda text: text, "ptb": clean_ptb, "twice_quoted": unquote_twice_quoted, "review": clean_review}
