"""pipelines.batch_predict with the families' signatures: `entities` rows (its model
handler) and `answer` over JSON Lines rows of question and context (the whole pipeline).
Each row's result equals the SavedModel called on that row alone (so a batch's padding
never shows), and a row the model refuses (a context too long for its windows) goes to
the dead letters while its batch mates are scored."""

import glob
import json

import numpy as np
import tensorflow as tf

from conftest import run_main


def results(prefix):
    return {row["id"].rsplit(":", 1)[1]: row for path in glob.glob(prefix + "-*-of-*.jsonl") for row in map(json.loads, open(path))}


def test_entities_and_answer_rows_equal_the_saved_model_and_refusals_are_dead_letters(tmp_path, tiny_families, capsys):
    from kerasbert.batch.handler import SavedModelSignatureHandler

    export = tiny_families[0]
    loaded = tf.saved_model.load(export)
    # The handler's rows (RunInference's batch of 3): each cut to its own entities and words.
    texts = ["the cat sat on the mat .", "dogs ran", "the dog sat on the mat fast the cats ran ."]
    handler = SavedModelSignatureHandler(export, "entities")
    scored = list(handler.run_inference([{"text": t} for t in texts], handler.load_model()))
    for text, result in zip(texts, scored):
        alone = {k: v.numpy()[0] for k, v in loaded.signatures["entities"](text=tf.constant([text])).items()}
        count, words = int(alone["num_entities"]), int(alone["num_words"])
        assert result.inference["entity_text"].tolist() == alone["entity_text"][:count].tolist()
        assert result.inference["entity_start"].tolist() == alone["entity_start"][:count].tolist()
        assert result.inference["word_tag"].tolist() == alone["word_tag"][:words].tolist()
    assert len({len(r.inference["word"]) for r in scored}) == 3  # padding of the batch gone

    rows = [{"question": "where is the cat ?", "context": " the cat sat on the mat ."},
            {"question": "the dog", "context": "the dog ran fast . " * 20},  # needs more than 3 windows
            {"question": "", "context": "the cat"},
            {"question": "who ran ?", "context": "dogs ran"}]
    lines = [json.dumps(row) for row in rows] + ["not json", '{"question": "who"}']
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefix = str(tmp_path / "out" / "answer")
    # In this process: the command's own process is tests/test_batch_predict.py's.
    out = run_main(["pipelines.batch_predict", "--model_dir", export, "--signature", "answer", "--input",
                    str(tmp_path / "questions.jsonl"), "--output", prefix, "--min_batch_size", "4"], capsys,
                   check=True).stdout
    assert "== rows read 6, scored 2, refused 4, empty 0" in out
    got = results(prefix)
    assert got.keys() == {"1", "4"}
    for line in (1, 4):
        row = rows[line - 1]
        alone = loaded.signatures["answer"](question=tf.constant([row["question"]]), context=tf.constant([row["context"]]))
        outputs = got[str(line)]["outputs"]
        assert got[str(line)]["inputs"] == row  # kept as given: the offsets point into it
        assert outputs["answer"] == alone["answer"].numpy()[0].decode()
        assert row["context"][outputs["answer_start"]:outputs["answer_end"]] == outputs["answer"]
        np.testing.assert_allclose(outputs["score"], alone["score"].numpy()[0], rtol=1e-5)
    dead = {row["id"].rsplit(":", 1)[1]: row["reason"] for row in map(json.loads, open(prefix + ".dead-letter.jsonl"))}
    assert "the model refused it" in dead["2"] and "context too long" in dead["2"]
    assert dead["3"] == "question: empty text"
    assert dead["5"].startswith("not JSON") and dead["6"] == "no string field 'context' (the signature takes context, question)"
