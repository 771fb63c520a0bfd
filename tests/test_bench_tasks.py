"""benchmarks.tasks compares kerasbert with transformers on "the same examples": with the peer's
environment present, the features the peer trains on (`python -m benchmarks.peer_torch
features`) are kerasbert's: the same word pieces, the same SQuAD windows at the same doc stride,
the same labelled positions. A killed peer run goes on as if never stopped."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import DATA_DIR, ROOT
from kerasbert.families.tagging.conll import read_conll
from kerasbert.families.span_qa.squad import read_squad

PEER_PYTHON = os.environ.get("KERASBERT_PEER_PYTHON", os.path.join(ROOT, ".venv-peer", "bin", "python"))


def dev_rows(count=12):
    """The first dev sentences and questions (and one of several windows) as the peer reads them."""
    sentences = read_conll(os.path.join(DATA_DIR, "conll2003", "dev.txt")).sentences[:count]
    questions = read_squad(os.path.join(DATA_DIR, "squad", "dev.json")).examples[:count]
    questions.append(questions[0].__class__("long", "What was Apollo?", " ".join([questions[0].context] * 4),
                                            questions[0].answers))  # several windows
    return ([{"words": s.words, "tags": s.tags} for s in sentences],
            [{"id": q.uid, "question": q.question, "context": q.context,
              "answers": [{"text": a.text, "start": a.start} for a in q.answers]} for q in questions])


TAG_NAMES = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
# The peer's `train`, killed once it has trained its second block but before it saves that block's state.
KILLED_AT_THE_SECOND_SAVE = """
import runpy, torch
save, saves = torch.save, []
def save_or_die(*args, **kwargs):
    saves.append(1)
    if len(saves) == 2:
        raise KeyboardInterrupt("killed before block 2's state is saved")
    return save(*args, **kwargs)
torch.save = save_or_die
runpy.run_module("benchmarks.peer_torch", run_name="__main__", alter_sys=True)
"""


def peer_inputs(folder, settings: dict, train: list[dict], dev: list[dict]) -> str:
    """`folder` as benchmarks.tasks writes a peer's inputs: settings.json, train.jsonl, dev.jsonl."""
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(settings))
    for split, rows in (("train", train), ("dev", dev)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(folder)


def peer(command: str, inputs: str, model_dir: str, output, *more: str, script=None) -> subprocess.CompletedProcess:
    """`python -m benchmarks.peer_torch COMMAND` in the peer's environment (or `script` with its arguments)."""
    start = ["-c", script] if script else ["-m", "benchmarks.peer_torch"]
    return subprocess.run([PEER_PYTHON, *start, command, "--inputs", inputs, "--model_dir", model_dir,
                           "--output", str(output), *more], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)


def peer_features(folder, settings: dict, rows: list[dict]) -> dict:
    from kerasbert.models.encoder import minilm_checkpoint

    result = peer("features", peer_inputs(folder, settings, [], rows), minilm_checkpoint(), folder / "out.json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((folder / "out.json").read_text())


@pytest.mark.skipif(not os.path.exists(PEER_PYTHON), reason="no peer environment (.venv-peer)")
def test_the_peers_features_are_kerasberts(tmp_path):
    from kerasbert.families.tagging.conll import tag_names
    from kerasbert.families.span_qa.features import SpanGraph, span_features
    from kerasbert.families.tagging.features import TaggingGraph, tagging_features
    from kerasbert.models.encoder import minilm_checkpoint
    from kerasbert.tokenization import load_tokenizer

    tags, spans = dev_rows()
    peer_tags = peer_features(tmp_path / "tags", {"kind": "tags", "tag_names": TAG_NAMES, "sequence_length": 32},
                              tags)
    peer_spans = peer_features(tmp_path / "span", {"kind": "span", "sequence_length": 64, "doc_stride": 16,
                                                   "max_query_length": 8}, spans)

    vocabulary = load_tokenizer(minilm_checkpoint()).get_vocabulary()
    sentences = read_conll(os.path.join(DATA_DIR, "conll2003", "dev.txt")).sentences[:len(tags)]
    ours = tagging_features(TaggingGraph(vocabulary, tag_names(sentences), 32), sentences)
    assert tag_names(sentences) == tuple(TAG_NAMES)
    np.testing.assert_array_equal(ours.token_ids, peer_tags["input_ids"])
    np.testing.assert_array_equal(np.where(ours.labels < 0, -100, ours.labels), peer_tags["labels"])

    questions = read_squad(os.path.join(DATA_DIR, "squad", "dev.json")).examples[:len(spans) - 1]
    questions.append(questions[0].__class__("long", spans[-1]["question"], spans[-1]["context"], questions[0].answers))
    windows = span_features(SpanGraph(vocabulary, 64, 16, 8), questions)
    assert len(windows.token_ids) > len(questions) + 10  # long contexts: several windows each
    np.testing.assert_array_equal(windows.token_ids, peer_spans["input_ids"])
    np.testing.assert_array_equal(windows.segment_ids, peer_spans["token_type_ids"])
    np.testing.assert_array_equal(windows.positions, np.stack([peer_spans["start_positions"],
                                                               peer_spans["end_positions"]], -1))


@pytest.mark.skipif(not os.path.exists(PEER_PYTHON), reason="no peer environment (.venv-peer)")
def test_the_peer_resumes_at_its_last_block_as_if_never_stopped(tmp_path):
    """The full-budget bench takes hours a side: a killed peer run goes on from its last
    finished block, to the very weights and predictions of a run never stopped."""
    from kerasbert.models.encoder import minilm_checkpoint

    tags, _ = dev_rows(count=24)
    settings = {"kind": "tags", "tag_names": TAG_NAMES, "sequence_length": 32, "batch_size": 4, "total_steps": 6,
                "steps_per_block": 2, "learning_rate": 1e-4, "warmup_steps": 1, "weight_decay": 0.01,
                "clipnorm": 1.0, "clip_scope": "each", "epsilon": 1e-6, "seed": 1}
    inputs, start = peer_inputs(tmp_path / "inputs", settings, tags, tags[:8]), ("--checkpoint", minilm_checkpoint())
    whole = peer("train", inputs, str(tmp_path / "whole"), tmp_path / "whole.json", *start)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = peer("train", inputs, str(tmp_path / "resumed"), tmp_path / "resumed.json", *start,
                  script=KILLED_AT_THE_SECOND_SAVE)
    assert killed.returncode != 0 and "killed before block 2" in killed.stderr, killed.stderr[-3000:]
    resumed = peer("train", inputs, str(tmp_path / "resumed"), tmp_path / "resumed.json", *start)
    assert resumed.returncode == 0 and "peer: resuming after block 1" in resumed.stdout, resumed.stderr[-3000:]
    ran, went_on = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("whole", "resumed"))
    assert len(went_on["block_predictions"]) == 3 and went_on["block_predictions"] == ran["block_predictions"]
    assert (tmp_path / "resumed" / "model.safetensors").read_bytes() == \
        (tmp_path / "whole" / "model.safetensors").read_bytes()  # the very weights
