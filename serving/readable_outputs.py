"""How `python -m serving.client` prints a signature's outputs: an answer with its character
offsets, entities one a line (type, text, [start:end), score), anything else `name: value`,
numbers to 4 decimals and long vectors cut.

Outputs are columnar, as `ServingClient.predict` returns them ({name: a value per example});
several examples are printed one block each, under `example N:`.

Example:
    >>> print(readable({"answer": ["Peter Blackburn"], "answer_start": [0], "answer_end": [15],
    ...                 "score": [0.0612]}))
    answer: 'Peter Blackburn' [0:15) score 0.0612
    >>> print(readable({"entity_type": [["PER", "LOC", ""]], "entity_text": [["Peter Blackburn", "Brussels", ""]],
    ...                 "entity_start": [[0, 24, -1]], "entity_end": [[15, 32, -1]],
    ...                 "entity_score": [[0.65, 0.43, 0.0]], "num_entities": [2]}))
    2 entities:
      PER  'Peter Blackburn'  [0:15)  score 0.6500
      LOC  'Brussels'         [24:32)  score 0.4300
    >>> print(readable({"class_name": ["positive"], "label": [3], "probabilities": [[0.01, 0.04, 0.1, 0.8, 0.05]]}))
    class_name: 'positive'
    label: 3
    probabilities: [0.0100, 0.0400, 0.1000, 0.8000, 0.0500]
"""

from __future__ import annotations

ANSWER = ("answer", "answer_start", "answer_end", "score")  # a span task's text signature
ENTITIES = ("entity_type", "entity_text", "entity_start", "entity_end", "entity_score", "num_entities")
SHOWN_VALUES = 8  # a longer vector (an embedding) is shown as its first and last values and its length


def readable(outputs: dict[str, list]) -> str:
    """The outputs of one predict call, as lines of text."""
    rows = len(next(iter(outputs.values()), []))
    blocks = [_example({name: values[row] for name, values in outputs.items()}) for row in range(rows)]
    if rows == 1:
        return blocks[0]
    return "\n".join(f"example {row + 1}:\n" + _indented(block) for row, block in enumerate(blocks))


def _example(values: dict) -> str:
    if set(ANSWER) <= set(values):
        return (f"answer: {values['answer']!r} [{values['answer_start']}:{values['answer_end']}) "
                f"score {values['score']:.4f}")
    if set(ENTITIES) <= set(values):
        return _entities(values)
    return "\n".join(f"{name}: {_value(value)}" for name, value in sorted(values.items()))


def _entities(values: dict) -> str:
    count = values["num_entities"]
    kinds, texts = values["entity_type"][:count], [repr(text) for text in values["entity_text"][:count]]
    lines = [f"{count} {'entity' if count == 1 else 'entities'}" + (":" if count else "")]
    for kind, text, start, end, score in zip(kinds, texts, values["entity_start"], values["entity_end"],
                                             values["entity_score"]):
        lines.append(f"  {kind:<{max(map(len, kinds))}}  {text:<{max(map(len, texts))}}  [{start}:{end})  "
                     f"score {score:.4f}")
    if values.get("num_untagged_words"):
        lines.append(f"  ({values['num_untagged_words']} words past the sequence length have no tag)")
    return "\n".join(lines)


def _value(value) -> str:
    if isinstance(value, list) and len(value) > SHOWN_VALUES:
        shown = [_value(item) for item in value[:3]] + ["..."] + [_value(item) for item in value[-2:]]
        return f"[{', '.join(shown)}] ({len(value)} values)"
    if isinstance(value, list):
        return f"[{', '.join(_value(item) for item in value)}]"
    if isinstance(value, float):
        return f"{value:.4f}"
    return repr(value)


def _indented(block: str) -> str:
    return "\n".join("  " + line for line in block.splitlines())
