"""What a user would pick for CPU inference, for `benchmarks.inference`: the same fine-tuned
classifier or tagger (kerasbert's `--format transformers` export) in transformers' pipeline (PyTorch),
and in ONNX Runtime, fp32 with its BERT optimizer and int8 by dynamic quantization (optimum's path:
the fast tokenizer, then the session). It runs in `.venv-peer` and never imports kerasbert or TensorFlow.

    python -m benchmarks.peer_onnx convert --model_dir HF_FOLDER --output_dir ONNX_FOLDER [--task tags]
    python -m benchmarks.peer_onnx worker --system ort_int8 --model_dir HF_FOLDER --onnx_dir ONNX_FOLDER \
        --texts texts.json [--task tags]  # then `{"batch_size": 1, "count": 100}` lines on stdin (peer_protocol)

A classifier answers a class index a text; a tagger a list of entities `[type, start, end]` (character
offsets) a text, as `pipeline("token-classification", aggregation_strategy="first")` groups them: a
word's tag is its first piece's, an entity starts at B- or where the type changes (`entities_of`).

`convert` writes model.onnx (torch.onnx.export, attention as transformers' eager code, which the
optimizer recognises), model_fp32.onnx (onnxruntime.transformers.optimizer: EmbedLayerNormalization,
Attention, BiasGelu and SkipLayerNormalization fusions) and model_int8.onnx (quantize_dynamic of the
optimized graph: int8 weights, activations quantized per call), and versions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from benchmarks.peer_protocol import answer_passes, write_json

SYSTEMS = ("transformers", "ort_fp32", "ort_int8")
MODELS = {"classes": "AutoModelForSequenceClassification", "tags": "AutoModelForTokenClassification"}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MAX_LENGTH = 128  # kerasbert's export packs at most this many tokens (data.max_sequence_length)


def versions() -> dict:
    import onnxruntime
    import torch
    import transformers
    return {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()}


def convert(args) -> dict:
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    model = getattr(transformers, MODELS[args.task]).from_pretrained(args.model_dir, attn_implementation="eager").eval()

    class Logits(torch.nn.Module):  # named inputs: transformers 5's forward takes others between them
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    os.makedirs(args.output_dir, exist_ok=True)
    paths = {name: os.path.join(args.output_dir, f"model{name}.onnx") for name in ("", "_fp32", "_int8")}
    ids = torch.ones((2, 8), dtype=torch.long)
    torch.onnx.export(Logits(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), paths[""], dynamo=False,
                      input_names=list(INPUTS), output_names=["logits"], opset_version=17,
                      dynamic_axes={name: {0: "batch", 1: "sequence"} for name in (*INPUTS, "logits")})
    optimized = optimizer.optimize_model(paths[""], model_type="bert", num_heads=model.config.num_attention_heads,
                                         hidden_size=model.config.hidden_size)
    fusions = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
    optimized.save_model_to_file(paths["_fp32"])
    # The fused ops' outputs have no type shape inference knows: float, as they are.
    quantize_dynamic(paths["_fp32"], paths["_int8"], weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": 1})
    found = {"fusions": fusions, "versions": versions()}
    write_json(os.path.join(args.output_dir, "versions.json"), found)
    return found


def classifier(system: str, model_dir: str, onnx_dir: str):
    """texts -> class indices, as `system` answers them from raw text."""
    if system == "transformers":
        run = pipeline_of("text-classification", model_dir)
        label2id = run.model.config.label2id
        return lambda texts: [label2id[found["label"]] for found in run(texts, batch_size=len(texts))]
    tokenizer, logits_of = onnx_session(system, model_dir, onnx_dir)
    return lambda texts: logits_of(tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH,
                                             return_tensors="np")).argmax(-1).tolist()


def tagger(system: str, model_dir: str, onnx_dir: str):
    """texts -> each text's entities `[type, start, end]`, as `system` answers them from raw text."""
    if system == "transformers":
        run = pipeline_of("token-classification", model_dir, aggregation_strategy="first")
        return lambda texts: [[[e["entity_group"], int(e["start"]), int(e["end"])] for e in found]
                              for found in run(texts, batch_size=len(texts))]
    import transformers

    tokenizer, logits_of = onnx_session(system, model_dir, onnx_dir)
    id2label = transformers.AutoConfig.from_pretrained(model_dir).id2label

    def call(texts):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="np",
                            return_offsets_mapping=True)
        tags = logits_of(encoded).argmax(-1)  # (batch, seq)
        return [entities_of(encoded.word_ids(row), encoded["offset_mapping"][row].tolist(),
                            [id2label[int(t)] for t in tags[row]]) for row in range(len(texts))]
    return call


def entities_of(word_ids: list, offsets: list, tags: list[str]) -> list[list]:
    """[type, start, end] of each entity in one text: a word tagged by its first piece (aggregation
    "first"); an entity starts at B-X, or I-X after O or after another type, and runs over the words
    tagged I-X after it; its offsets are its first piece's start and its last piece's end.

    >>> entities_of([None, 0, 0, 1, 2, None], [[0, 0], [0, 3], [3, 5], [6, 11], [12, 14], [0, 0]],
    ...             ["O", "B-PER", "O", "I-PER", "B-LOC", "O"])
    [['PER', 0, 11], ['LOC', 12, 14]]
    """
    found, last_word = [], None
    for word, (start, end), tag in zip(word_ids, offsets, tags):
        if word is None:
            continue
        if word == last_word:  # a later piece of the word: extends whatever the word belongs to
            if found and found[-1][3] == word:
                found[-1][2] = end
            continue
        last_word = word
        prefix, kind = (tag[0], tag[2:]) if tag != "O" else ("O", "")
        if prefix == "O":
            continue
        if prefix == "B" or not found or found[-1][0] != kind or found[-1][3] != word - 1:
            found.append([kind, start, end, word])
        else:
            found[-1][2:] = [end, word]
    return [entity[:3] for entity in found]


def pipeline_of(task: str, model_dir: str, **options):
    import transformers

    return transformers.pipeline(task, model=model_dir, device="cpu", **options)


def onnx_session(system: str, model_dir: str, onnx_dir: str):
    """(the fast tokenizer, encoded -> logits) of the ONNX model `system` names."""
    import onnxruntime
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    session = onnxruntime.InferenceSession(os.path.join(onnx_dir, f"model_{system[len('ort_'):]}.onnx"),
                                           providers=["CPUExecutionProvider"])

    def logits_of(encoded):  # padded to the batch's longest text, as optimum's pipelines pad
        logits, = session.run(["logits"], {name: encoded[name].astype(np.int64) for name in INPUTS})
        return logits
    return tokenizer, logits_of


def worker(args) -> None:
    import torch

    answers, sys.stdout = sys.stdout, sys.stderr  # stdout carries the answers only
    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    call = {"classes": classifier, "tags": tagger}[args.task](args.system, args.model_dir, args.onnx_dir)
    with torch.inference_mode():
        answers.write(json.dumps({"ready": args.system, "versions": versions()}) + "\n")
        answers.flush()
        answer_passes(call, texts, sys.stdin, answers)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_onnx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    converting = commands.add_parser("convert", help="The transformers folder as ONNX, fp32 optimized and int8.")
    converting.add_argument("--model_dir", required=True)
    converting.add_argument("--output_dir", required=True)
    converting.add_argument("--task", default="classes", choices=list(MODELS), help="The folder's head.")
    working = commands.add_parser("worker", help="Timed passes of one system over --texts, asked on stdin.")
    working.add_argument("--system", required=True, choices=SYSTEMS)
    working.add_argument("--model_dir", required=True, help="The transformers folder.")
    working.add_argument("--onnx_dir", default="", help="convert's --output_dir (the ort_* systems).")
    working.add_argument("--texts", required=True, help="A JSON list of the texts.")
    working.add_argument("--task", default="classes", choices=list(MODELS), help="Classes or entities.")
    args = parser.parse_args(argv)
    if args.command == "convert":
        print(json.dumps(convert(args)))
    else:
        worker(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
