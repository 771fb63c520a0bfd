"""kerasbert against transformers (benchmarks/peer_torch.py, in .venv-peer) where the two must agree:

    gelu   MiniLM with a new classifier head (scale 1, seeded), saved by transformers once with
           hidden_act "gelu" (exact) and once "gelu_new" (tanh), imported by kerasbert: the largest
           difference of the probabilities over --rows SST-5 dev texts (the goal: 1e-5).
    words  a kerasbert tagger run and its transformers export (pipelines.export --format transformers)
           on CoNLL-2003 dev: the share of sentences (words joined by spaces) for which transformers'
           `pipeline("token-classification", aggregation_strategy="first")` finds the same entities,
           [type, start, end, text], as the run's `entities` signature (the goal: 99% for a task whose
           words are "punctuation"; one of "spaces" keeps "U.S." whole where transformers reads four:
           cause "words"). Cause "cut": a sentence longer than the tagger's sequence_length, whose
           later words the signature leaves untagged, where transformers reads up to 512 pieces.

    python -m benchmarks.transformers_parity gelu [--rows 200]
    python -m benchmarks.transformers_parity words --model_dir RUN --hf_folder RUN-hf/ner [--rows 0]

Writes <output_dir>/gelu.json or words.json (words: each differing row and its cause).
"""

import os
import sys

import numpy as np

from benchmarks.peer_protocol import save_examples, write_json
from benchmarks.results import bench_parser, run_peer
from benchmarks.tasks import agreement, as_peer_row, batches_of, by_row
from kerasbert.families.tagging.conll import read_conll

CLASS_NAMES = ["very negative", "negative", "neutral", "positive", "very positive"]


def plain(value):
    """A signature output (NumPy bytes, integers) as JSON's value, as the peer's rows hold them."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def predicted(model_dir: str, signature: str, texts: list[str], batch_size: int = 64) -> list[dict]:
    """Each text's outputs of `signature` of a kerasbert run, as plain values."""
    from kerasbert.finetuning.text_predictor import TextPredictor

    predictor, batches = TextPredictor.from_run(model_dir), batches_of(texts, batch_size)
    outputs = [predictor.predict(signature, batch) for batch in batches]
    return [{name: plain(value) for name, value in row.items()} for row in by_row(outputs, batches)]


def part_gelu(args) -> dict:
    from kerasbert.hf.importing import import_transformers
    from kerasbert.models.encoder import minilm_checkpoint

    with open(os.path.join(args.data_dir, "cs224n", "sst-dev.tsv"), encoding="utf-8") as f:
        texts = [line.split("\t")[2].strip() for line in list(f)[1:args.rows + 1]]  # id, ?, sentence, label
    found = {}
    for hidden_act in ("gelu", "gelu_new"):
        inputs, hf = (os.path.join(args.output_dir, hidden_act, part) for part in ("inputs", "hf"))
        os.makedirs(inputs, exist_ok=True)
        save_examples(os.path.join(inputs, "dev.jsonl"), [{"text": text} for text in texts])
        write_json(os.path.join(inputs, "settings.json"), {"kind": "classes", "hidden_act": hidden_act,
                                                           "class_names": CLASS_NAMES})
        run_peer(args.peer_python, "classifier", ["--inputs", inputs, "--checkpoint", minilm_checkpoint(),
                                                  "--model_dir", hf], os.path.join(args.output_dir, hidden_act, "peer.json"))
        theirs = run_peer(args.peer_python, "outputs", ["--inputs", inputs, "--model_dir", hf, "--batch_size", "32"],
                          os.path.join(args.output_dir, hidden_act, "transformers.json"))["rows"]
        run = os.path.join(args.output_dir, hidden_act, "run")
        if not os.path.isdir(run):
            import_transformers(hf, run)
        ours = [row["probabilities"] for row in predicted(run, "classifier", texts)]
        their = np.array([[row["probabilities"][name] for name in CLASS_NAMES] for row in theirs])
        gaps = np.abs(np.array(ours) - their)
        found[hidden_act] = {"rows": len(texts), "max_probability_difference": float(gaps.max()),
                             "rows_over_1e-5": int((gaps.max(axis=1) > 1e-5).sum()),
                             "top_class_equal": int((np.argmax(ours, 1) == np.argmax(their, 1)).sum())}
        print(f"== hidden_act {hidden_act}: {found[hidden_act]}")
    return found


def part_words(args) -> dict:
    sentences = read_conll(os.path.join(args.data_dir, "conll2003", "dev.txt")).sentences
    dev = [{"words": s.words, "tags": s.tags} for s in sentences[:args.rows or None]]
    inputs = os.path.join(args.output_dir, "words-inputs")
    os.makedirs(inputs, exist_ok=True)
    save_examples(os.path.join(inputs, "dev.jsonl"), dev)
    write_json(os.path.join(inputs, "settings.json"), {"kind": "tags"})
    theirs = run_peer(args.peer_python, "outputs", ["--inputs", inputs, "--model_dir", args.hf_folder,
                                                    "--batch_size", "32"],
                      os.path.join(args.output_dir, "words-transformers.json"))["rows"]
    outputs = predicted(args.model_dir, args.signature, [" ".join(row["words"]) for row in dev])
    found = agreement("ner", dev, [as_peer_row("ner", row, []) for row in outputs], theirs)
    for difference in found["differences"]:  # the signature cut the sentence; transformers reads up to 512 pieces
        if outputs[difference["row"]]["num_untagged_words"]:
            difference["cause"] = "cut"
    found.pop("equal_but_for_words")
    found["causes"] = {cause: sum(d["cause"] == cause for d in found["differences"])
                       for cause in sorted({d["cause"] for d in found["differences"]})}
    print(f"== {args.model_dir}: entities equal to transformers' pipeline(aggregation_strategy=\"first\") on "
          f"{found['rows'] - len(found['differences'])}/{found['rows']} dev sentences ({found['equal']:.2%}); "
          f"differences by cause: {found['causes']}")
    return found


PARTS = {"gelu": part_gelu, "words": part_words}


def main(argv=None) -> int:
    parser = bench_parser("transformers_parity", __doc__, peer_python=True)
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("--model_dir", help="words: a kerasbert run with a tags task.")
    parser.add_argument("--hf_folder", help="words: its task's transformers folder (pipelines.export).")
    parser.add_argument("--signature", default="entities", help="words: the task's text signature.")
    parser.add_argument("--rows", type=int, default=0, help="The first N dev rows (gelu: default 200; words: 0, all).")
    args = parser.parse_args(argv)
    if args.part == "words" and not (args.model_dir and args.hf_folder):
        parser.error("words takes --model_dir and --hf_folder")
    args.rows = args.rows or (200 if args.part == "gelu" else 0)
    os.makedirs(args.output_dir, exist_ok=True)
    write_json(os.path.join(args.output_dir, f"{args.part}.json"), PARTS[args.part](args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
