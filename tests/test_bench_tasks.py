"""benchmarks.tasks compares kerasbert with transformers on "the same examples": the files
kerasbert trains on read back to the very rows the peer gets, and (with the peer's
environment present) the peer's features are kerasbert's: the same word pieces, the same
SQuAD windows at the same doc stride, the same labelled positions."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import DATA_DIR, ROOT
from kerasbert.families.conll import read_conll
from kerasbert.families.squad import read_squad

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


PEER_FEATURES = """
import json, sys
import transformers
from benchmarks.peer_tasks import span_windows, tag_features
tags, spans, checkpoint = json.load(open(sys.argv[1]))
tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
names = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
t = tag_features(tokenizer, tags, {"tag_names": names, "sequence_length": 32})
s = span_windows(tokenizer, spans, {"sequence_length": 64, "doc_stride": 16, "max_query_length": 8})
print(json.dumps({"tag_ids": t["input_ids"].tolist(), "labels": t["labels"].tolist(),
                  "span_ids": s["input_ids"].tolist(), "segments": s["token_type_ids"].tolist(),
                  "positions": [list(p) for p in zip(s["start_positions"].tolist(), s["end_positions"].tolist())]}))
"""


@pytest.mark.skipif(not os.path.exists(PEER_PYTHON), reason="no peer environment (.venv-peer)")
def test_the_peers_features_are_kerasberts(tmp_path):
    from kerasbert.families.conll import tag_names
    from kerasbert.families.span_qa import SpanGraph, span_features
    from kerasbert.families.tagging import TaggingGraph, tagging_features
    from kerasbert.models.encoder import minilm_checkpoint
    from kerasbert.tokenization import load_tokenizer

    tags, spans = dev_rows()
    (tmp_path / "rows.json").write_text(json.dumps([tags, spans, minilm_checkpoint()]))
    result = subprocess.run([PEER_PYTHON, "-c", PEER_FEATURES, str(tmp_path / "rows.json")], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    peer = json.loads(result.stdout.strip().splitlines()[-1])

    vocabulary = load_tokenizer(minilm_checkpoint()).get_vocabulary()
    sentences = read_conll(os.path.join(DATA_DIR, "conll2003", "dev.txt")).sentences[:len(tags)]
    ours = tagging_features(TaggingGraph(vocabulary, tag_names(sentences), 32), sentences)
    assert tag_names(sentences) == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    np.testing.assert_array_equal(ours.token_ids, peer["tag_ids"])
    np.testing.assert_array_equal(np.where(ours.labels < 0, -100, ours.labels), peer["labels"])

    questions = read_squad(os.path.join(DATA_DIR, "squad", "dev.json")).examples[:len(spans) - 1]
    questions.append(questions[0].__class__("long", spans[-1]["question"], spans[-1]["context"], questions[0].answers))
    windows = span_features(SpanGraph(vocabulary, 64, 16, 8), questions)
    assert len(windows.token_ids) > len(questions) + 10  # long contexts: several windows each
    np.testing.assert_array_equal(windows.token_ids, peer["span_ids"])
    np.testing.assert_array_equal(windows.segment_ids, peer["segments"])
    np.testing.assert_array_equal(windows.positions, peer["positions"])


PEER_RESUME = """
import json, sys
import torch, transformers
from benchmarks.peer_tasks import model_of, predict_tags, tag_features, train_blocks
tags, checkpoint, folder = json.load(open(sys.argv[1]))
names = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
settings = {"kind": "tags", "tag_names": names, "sequence_length": 32, "batch_size": 4, "total_steps": 6,
            "steps_per_block": 2, "learning_rate": 1e-4, "warmup_steps": 1, "weight_decay": 0.01,
            "clipnorm": 1.0, "clip_scope": "each", "epsilon": 1e-6, "seed": 1}
tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
features = tag_features(tokenizer, tags, settings)

def run(state_path, crash_at_block=None):
    torch.manual_seed(0)  # the same fresh head on every run
    model, scored = model_of("tags", checkpoint, settings), []
    def score_block(model):
        scored.append(1)
        if len(scored) == crash_at_block:
            raise KeyboardInterrupt  # killed before the block's state is saved
        return predict_tags(model, features, names)
    try:
        return model, train_blocks(model, features, "tags", settings, state_path, score_block)
    except KeyboardInterrupt:
        return None, None

whole, whole_progress = run(folder + "/whole.pt")
assert run(folder + "/resumed.pt", crash_at_block=2) == (None, None)
first = torch.load(folder + "/resumed.pt", weights_only=False)["progress"]
resumed, resumed_progress = run(folder + "/resumed.pt")
same = all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()))
print(json.dumps({"same_weights": same, "blocks_after_crash": first["blocks_done"],
                  "blocks": [whole_progress["blocks_done"], resumed_progress["blocks_done"]],
                  "same_predictions": whole_progress["block_predictions"] == resumed_progress["block_predictions"]}))
"""


@pytest.mark.skipif(not os.path.exists(PEER_PYTHON), reason="no peer environment (.venv-peer)")
def test_the_peer_resumes_at_its_last_block_as_if_never_stopped(tmp_path):
    """The full-budget bench takes hours a side: a killed peer run goes on from its last
    finished block, to the very weights and predictions of a run never stopped."""
    from kerasbert.models.encoder import minilm_checkpoint

    tags, _ = dev_rows(count=24)
    (tmp_path / "rows.json").write_text(json.dumps([tags, minilm_checkpoint(), str(tmp_path)]))
    result = subprocess.run([PEER_PYTHON, "-c", PEER_RESUME, str(tmp_path / "rows.json")], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"same_weights": True, "blocks_after_crash": 1, "blocks": [3, 3], "same_predictions": True}
