"""Tasks declared in a config, on the user's own CSV, TSV and JSON Lines files: every kind from
every format, the checks made before any training, and a run folder that carries its tasks
to evaluate and export."""

import csv
import json
import os

import numpy as np
import pytest

from conftest import run_main
from kerasbert.config import ConfigError, FinetuneConfig, load_config
from kerasbert.data.rows import DataError
from kerasbert.data.task_files import read_task_file, read_training_file
from kerasbert.tasks import Task, TaskError, declare_tasks

WORDS = ["refund", "charge", "crash", "error", "login", "password", "slow", "page", "card", "screen"]


def write_csv(path, header, rows, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    return str(path)


def text(i):
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 4 + i % 3)) + f', "item {i}"'


def test_every_kind_from_every_format_labels_as_text_and_as_numbers(tmp_path):
    categories = ["billing", "bug", "account"]
    tickets = Task("tickets", "classes", text="body", label="category")  # CSV, text labels
    csv_file = write_csv(tmp_path / "t.csv", ["id", "body", "category"],
                         [[f"t{i}", text(i) + "\nsecond line", categories[i % 3]] for i in range(12)])
    task, result = read_training_file(tickets, csv_file)
    assert task.settings.served_names == ("account", "billing", "bug")  # sorted, as found
    assert [e.label for e in result.examples[:3]] == [1, 2, 0]
    assert result.examples[0].text_a == text(0) + " second line"  # quoted comma, quote and newline kept

    nli = Task("nli", "pair_classes", text_a="premise", text_b="hypothesis", label="gold_label",
               class_names=("entailment", "neutral", "contradiction"))  # JSONL, the declared order
    jsonl = write_jsonl(tmp_path / "n.jsonl", [{"premise": text(i), "hypothesis": text(i + 1),
                                                "gold_label": ["neutral", "entailment", "contradiction"][i % 3]}
                                               for i in range(9)])
    task, result = read_training_file(nli, jsonl)
    assert task.settings.served_names == ("entailment", "neutral", "contradiction")
    assert [e.label for e in result.examples[:3]] == [1, 0, 2] and result.examples[0].text_b == text(1)

    stars = Task("stars", "classes", text="review", label="stars")  # JSONL, numbers as classes
    jsonl = write_jsonl(tmp_path / "s.jsonl", [{"review": text(i), "stars": [1, 2, 10, 9][i % 4]} for i in range(8)])
    task, result = read_training_file(stars, jsonl)
    assert task.settings.served_names == ("1", "2", "9", "10")  # numbers sorted as numbers
    assert [e.label for e in result.examples[:4]] == [0, 1, 3, 2]

    same = Task("same", "pair_binary", text_a="a", text_b="b", label="same",
                class_names=("different", "same"), labels=("0", "1"))  # TSV, "1.0" is 1
    tsv = write_csv(tmp_path / "p.tsv", ["a", "b", "same"], [[text(i), text(i + 2), f"{i % 2}.0"] for i in range(6)],
                    delimiter="\t")
    assert [e.label for e in read_training_file(same, tsv)[1].examples[:2]] == [0, 1]

    rating = Task("rating", "score", text="review", label="stars", min_score=1, max_score=5)  # TSV
    tsv = write_csv(tmp_path / "r.tsv", ["review", "stars"], [[text(i), str(1 + i % 5)] for i in range(10)],
                    delimiter="\t")
    task, result = read_training_file(rating, tsv)
    assert (task.settings.min_score, task.settings.max_score) == (1.0, 5.0) and result.examples[3].label == 4.0

    similar = Task("similar", "pair_score", text_a="s1", text_b="s2", label="score")  # CSV, range from the file
    task, result = read_training_file(similar, write_csv(tmp_path / "ps.csv", ["s1", "s2", "score"],
                                                         [[text(i), text(i + 1), i / 4] for i in range(9)]))
    assert (task.settings.min_score, task.settings.max_score) == (0.0, 2.0) and len(result.examples) == 9


def test_each_check_before_training_names_file_line_and_column(tmp_path):
    tickets = Task("tickets", "classes", text="body", label="category")
    rows = [[text(i), ["a", "b"][i % 2]] for i in range(6)]
    with pytest.raises(DataError, match=r"t.csv:1: header lacks column\(s\) \['category'\] for task 'tickets' "
                                        r"\(csv\). Header: \['body', 'cat'\]"):
        read_training_file(tickets, write_csv(tmp_path / "t.csv", ["body", "cat"], rows))
    with pytest.raises(DataError, match=r"n.jsonl:1: no key 'category' for task 'tickets'. Keys: \['body'\]"):
        read_training_file(tickets, write_jsonl(tmp_path / "n.jsonl", [{"body": "x"}]))
    task, _ = read_training_file(tickets, write_csv(tmp_path / "train.csv", ["body", "category"], rows))
    dev = write_csv(tmp_path / "dev.csv", ["body", "category"], rows[:2] + [["new text", "c"]])
    with pytest.raises(DataError, match=r"dev.csv:4: column 'category': label 'c' is not one of task 'tickets''s "
                                        r"classes \['a', 'b'\]"):
        read_task_file(task, dev)
    declared = Task("tickets", "classes", text="body", label="category", class_names=("a", "b", "c"))
    with pytest.raises(DataError, match=r"train.csv: column 'category' has no training example of class\(es\) "
                                        r"\['c'\] of task 'tickets'"):
        read_training_file(declared, str(tmp_path / "train.csv"))
    with pytest.raises(DataError, match=r"one.csv: column 'category' has one class only \('a'\)"):
        read_training_file(tickets, write_csv(tmp_path / "one.csv", ["body", "category"], [["x", "a"], ["y", "a"]]))
    stars = Task("stars", "score", text="body", label="stars")
    with pytest.raises(DataError, match=r"s.csv:3: column 'stars': label 'five' is not a number"):
        read_training_file(stars, write_csv(tmp_path / "s.csv", ["body", "stars"], [["x", "1"], ["y", "five"]]))
    declared_range = Task("stars", "score", text="body", label="stars", min_score=1, max_score=5)
    with pytest.raises(DataError, match=r"s.csv:3: column 'stars': label 'five' is not a number"):
        read_training_file(declared_range, str(tmp_path / "s.csv"))

    with pytest.raises(TaskError, match=r"declares task\(s\) \['tickets'\] twice"):
        declare_tasks([tickets, tickets])
    config = tmp_path / "config.json"
    config.write_text('{"tasks": {"tickets": {"kind": "classes", "text": "a"}, "tickets": {"kind": "score", "text": "b"}}}')
    with pytest.raises(ConfigError, match=r"config.json: key\(s\) \['tickets'\] given twice"):
        load_config(FinetuneConfig, str(config))
    with pytest.raises(ConfigError, match=r"task 'embed''s signature 'embed' clashes with a signature of the export"):
        load_config(FinetuneConfig, None, ['tasks.embed={"kind": "classes", "text": "t"}'])
    with pytest.raises(ConfigError, match=r"task 'sentiment''s signature 'sentiment' clashes with a signature of "
                                          r"task 'sst'; rename the task, or declare a \"head\""):
        declare_tasks_as_config({"sst": {}, "sentiment": {"kind": "classes", "text": "t"}})
    with pytest.raises(ConfigError, match=r"task 'nli': a pair_classes task names its text column\(s\) text_a and "
                                          r"text_b; missing: \['text_b'\]"):
        declare_tasks_as_config({"nli": {"kind": "pair_classes", "text_a": "p"}})
    with pytest.raises(ConfigError, match=r"task 'x' is not a shipped task .* needs a kind"):
        declare_tasks_as_config({"x": {"text": "t"}})


def declare_tasks_as_config(tasks):
    return load_config(FinetuneConfig, None, ["tasks=" + json.dumps(tasks)]).tasks


def test_the_config_layouts_a_task_file_and_overrides_declare_the_same_tasks(tmp_path):
    declaration = {"tickets": {"kind": "classes", "train_file": "t.csv", "dev_file": "d.csv",
                               "text": "body", "label": "category"},
                   "sts": {}}
    (tmp_path / "tasks.json").write_text(json.dumps(declaration))
    (tmp_path / "a.json").write_text(json.dumps({"tasks": declaration}))
    (tmp_path / "b.json").write_text(json.dumps({"tasks": "tasks.json"}))
    inline = load_config(FinetuneConfig, str(tmp_path / "a.json"))
    assert load_config(FinetuneConfig, str(tmp_path / "b.json")).tasks == inline.tasks
    assert list(inline.tasks) == ["tickets", "sts"] and inline.tasks["sts"].title == "STS-B"
    overridden = load_config(FinetuneConfig, str(tmp_path / "a.json"), ["tasks.tickets.train_file=other.csv",
                                                                         "schedule.loss_weights.tickets=2"])
    assert overridden.tasks["tickets"].train_file == "other.csv" and overridden.schedule.loss_weights["tickets"] == 2
    # The resolved config (config.json of a run) reads back as the same tasks.
    from kerasbert.config import from_dict, to_dict
    assert from_dict(FinetuneConfig, json.loads(json.dumps(to_dict(inline)))).tasks == inline.tasks


@pytest.mark.parametrize("file_format", ["csv", "tsv", "jsonl"])
@pytest.mark.parametrize("kind", ["classes", "pair_classes", "pair_binary", "score", "pair_score"])
def test_each_kind_reads_from_each_format(tmp_path, kind, file_format):
    pair, classes = kind.startswith("pair_"), kind in ("classes", "pair_classes", "pair_binary")
    values = (["no", "yes"] if kind == "pair_binary" else ["a", "b", "c"]) if classes else [0.5, 1.5, 4.0]
    records = [{"x": text(i), "y": text(i + 1), "gold": values[i % len(values)]} for i in range(9)]
    columns = {"text_a": "x", "text_b": "y"} if pair else {"text": "x"}
    path = tmp_path / f"train.{file_format}"
    if file_format == "jsonl":
        write_jsonl(path, records)
    else:
        write_csv(path, list(records[0]), [list(r.values()) for r in records], "," if file_format == "csv" else "\t")
    task, result = read_training_file(Task("t", kind, label="gold", **columns), str(path))
    assert len(result.examples) == 9 and result.examples[4].text_a == text(4)
    assert result.examples[4].text_b == (text(5) if pair else "")
    if classes:
        assert task.settings.served_names == tuple(values) and [e.label for e in result.examples[:3]] == [0, 1, 2 % len(values)]
    else:
        assert (task.settings.min_score, task.settings.max_score) == (0.5, 4.0) and result.examples[2].label == 4.0


# --- The families: tags (CoNLL files) and span (SQuAD JSON) beside a sentence task ----------------

PEOPLE, PLACES = ["Peter Blackburn", "Anna", "John Smith", "Maria"], ["Paris", "New York", "Berlin", "Rome"]


def write_conll(path, count, damaged=False):
    """`count` sentences "<person> visited <place> ." in CoNLL-2003's four columns."""
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(count):
        person, place = PEOPLE[i % 4].split(), PLACES[(i // 4) % 4].split()
        tags = [("B-" if j == 0 else "I-") + "PER" for j in range(len(person))] + ["O"] + \
            [("B-" if j == 0 else "I-") + "LOC" for j in range(len(place))] + ["O"]
        lines += [f"{word} NNP B-NP {tag}" for word, tag in zip(person + ["visited"] + place + ["."], tags)] + [""]
    if damaged:  # a line of 3 fields in a file of 4: its sentence is skipped and counted
        lines += ["Bad NN O", "line NN B-NP O", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def write_squad(path, count, off_offset=False):
    """`count` questions "Where did <person> go?" on "<person> visited <place> last year."."""
    paragraphs = []
    for i in range(count):
        person, place = PEOPLE[i % 4], PLACES[(i // 4) % 4]
        context = f"{person} visited {place} last year, and {PEOPLE[(i + 1) % 4]} stayed home."
        answers = [{"text": place, "answer_start": context.index(place)}]
        if off_offset and i == 0:  # an answer whose offset does not point at its text: counted, skipped
            answers.append({"text": place, "answer_start": 0})
        paragraphs.append({"context": context, "qas": [{"id": f"q{i}", "question": f"Where did {person} go?",
                                                         "answers": answers}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": paragraphs}]}),
                    encoding="utf-8")
    return str(path)


def test_the_family_kinds_are_declared_and_read(tmp_path, caplog, capsys):
    ner, squad = declare_tasks("ner,squad").values()
    assert (ner.kind, ner.head, ner.signature_names, ner.metric_names) == \
        ("tags", "entities", ("entities", "entities_tokens"), ("ner_f1", "ner_precision", "ner_recall"))
    assert (squad.kind, squad.signature_names, squad.metric_names) == \
        ("span", ("answer", "answer_tokens"), ("squad_f1", "squad_exact_match"))
    task, result = read_training_file(ner, write_conll(tmp_path / "train.txt", 24, damaged=True))
    assert task.settings.labels == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER") and (len(result.examples), result.skipped) == (24, 1)
    assert "train.txt:143: skipped damaged row (3 fields, the file's first word line has 4)" in caplog.text
    task, result = read_training_file(squad, write_squad(tmp_path / "train.json", 12, off_offset=True))
    assert (len(result.examples), result.skipped, result.skipped_answers) == (12, 0, 1)
    from kerasbert.data.task_files import sample_examples
    sample_examples(result)
    assert "1 answer(s) whose answer_start does not point at their text" in capsys.readouterr().out
    mine = declare_tasks({"people": {"kind": "tags", "train_file": "p.conll"}, "qa": {"kind": "span",
                                                                                  "max_answer_length": 8}})
    assert mine["people"].is_resolved is False and mine["qa"].settings.max_answer_length == 8
    with pytest.raises(TaskError, match="a tags task reads conll files. Received: format='csv'"):
        Task("t", "tags", format="csv")
    with pytest.raises(TaskError, match=r"^task 'q': text is a .* task's setting; a span task has none$"):
        Task("q", "span", text="question")
    with pytest.raises(TaskError, match="'O' first"):
        Task("t", "tags", labels=("B-PER", "O"))
    config = load_config(FinetuneConfig, None, ["tasks=sst,ner"])
    assert list(config.tasks) == ["sst", "ner"] and config.tasks["ner"].train_file == "conll2003/train.txt"


@pytest.mark.end_to_end
def test_a_run_on_tasks_of_every_family_is_scored_evaluated_reloaded_and_exported_from_its_folder(
        tmp_path, capsys, monkeypatch, tiny_checkpoint):
    """One run of the user's own files in every family (classes from a CSV, pair classes from
    JSON Lines, a score from a TSV, CoNLL tags, SQuAD spans), then its folder alone: evaluated,
    reloaded, exported and the export answering as the in-memory model does."""
    import subprocess
    import sys

    import tensorflow as tf

    from conftest import ROOT
    from kerasbert.finetuning.evaluation import predict_examples, score_file
    from kerasbert.finetuning.load import load_finetuned

    categories = ["billing", "bug", "account"]
    data = tmp_path / "data"
    data.mkdir()
    for split, count in (("train", 48), ("dev", 24)):
        write_csv(data / f"tickets-{split}.csv", ["body", "category"],
                  [[text(i), categories[i % 3]] for i in range(count)])
        write_jsonl(data / f"nli-{split}.jsonl", [{"premise": text(i), "hypothesis": text(i + 1),
                                                    "gold_label": ["entailment", "neutral", "contradiction"][i % 3]}
                                                   for i in range(count)])
        write_csv(data / f"stars-{split}.tsv", ["review", "stars"], [[text(i), 1 + i % 5] for i in range(count)],
                  delimiter="\t")
    config = {"tasks": {
        "tickets": {"kind": "classes", "train_file": "tickets-train.csv", "dev_file": "tickets-dev.csv",
                    "text": "body", "label": "category"},
        "nli": {"kind": "pair_classes", "train_file": "nli-train.jsonl", "dev_file": "nli-dev.jsonl",
                "text_a": "premise", "text_b": "hypothesis", "label": "gold_label"},
        "stars": {"kind": "score", "train_file": "stars-train.tsv", "dev_file": "stars-dev.tsv",
                  "text": "review", "label": "stars", "min_score": 1, "max_score": 5},
        "ner": {"train_file": write_conll(data / "ner-train.txt", 24), "dev_file": write_conll(data / "ner-dev.txt", 12)},
        "squad": {"train_file": write_squad(data / "squad-train.json", 16),
                  "dev_file": write_squad(data / "squad-dev.json", 8), "sequence_length": 24,
                  "doc_stride": 4, "max_query_length": 8}},
        "data": {"max_sequence_length": 32},
        "schedule": {"sampling": "round_robin"},  # a step of each task
        "train": {"batch_size": 4, "total_steps": 5, "steps_per_block": 5, "learning_rate": 1e-3}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    output, export_base = tmp_path / "out", tmp_path / "export"
    run_main(["pipelines.finetune", "--config", str(tmp_path / "config.json"), "--data_dir", str(data),
              "--init_checkpoint", tiny_checkpoint, "--output_dir", str(output)], capsys, check=True)
    metrics = json.loads((output / "metrics.json").read_text())
    assert {"tickets_accuracy", "nli_accuracy", "stars_pearson", "stars_spearman", "ner_f1", "ner_precision",
            "ner_recall", "ner_f1_PER", "ner_f1_LOC", "squad_f1", "squad_exact_match", "overall"} <= set(metrics)
    assert all(0 <= metrics[key] <= 1 for key in ("ner_f1", "squad_f1", "squad_exact_match"))
    assert set(metrics["per_class"]["nli"]) == {"contradiction", "entailment", "neutral"}
    assert sum(row["support"] for row in metrics["per_class"]["tickets"].values()) == 24
    assert set(metrics["per_class"]["ner"]) == {"LOC", "PER"} and metrics["per_class"]["ner"]["PER"]["support"] == 12
    assert (output / "tickets_confusion.png").exists() and (output / "nli_confusion.png").exists()
    report = (output / "report.md").read_text()
    assert "| neutral |" in report and "![tickets confusion matrix](tickets_confusion.png)" in report
    assert "| entity type | precision | recall | F1 | dev entities |" in report
    assert (output / "predictions" / "squad-dev.tsv").read_text().splitlines()[1].startswith("q0\t")

    # The run folder alone: evaluate a file of a declared task, or a task's own dev file; reload it
    # (its tasks' tag names kept) and score as the run scored.
    monkeypatch.chdir(tmp_path)  # nothing resolves against the data folder any more
    evaluated = run_main(["pipelines.evaluate", "--model_dir", str(output), "--task", "tickets",
                          "--data_file", str(data / "tickets-dev.csv")], capsys, check=True)
    assert json.loads(evaluated.stdout)["tickets_accuracy"] == pytest.approx(metrics["tickets_accuracy"])
    refused = run_main(["pipelines.evaluate", "--model_dir", str(output), "--task", "sst",
                        "--data_file", str(data / "tickets-dev.csv")], capsys)
    assert refused.returncode != 0 and "no head for task 'sst'; its tasks: tickets, nli, stars, ner, squad" in \
        refused.stderr
    evaluated = run_main(["pipelines.evaluate", "--run_dir", str(output), "--task", "ner", "--data_dir", str(data)],
                         capsys, check=True)
    assert json.loads(evaluated.stdout)["ner_f1"] == pytest.approx(metrics["ner_f1"])
    _, model, preprocessor = load_finetuned(str(output))
    assert model.task_specs["ner"].settings.labels == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    assert score_file(model, preprocessor, "squad", str(data / "squad-dev.json"))["squad_f1"] == \
        pytest.approx(metrics["squad_f1"])

    # The export: every task's signatures, the sentence ones loaded here...
    run_main(["pipelines.export", "--model_dir", str(output), "--export_base", str(export_base)], capsys, check=True)
    loaded = tf.saved_model.load(str(export_base / "1"))
    assert {"tickets", "tickets_tokens", "tickets_classify", "nli", "nli_tokens", "nli_classify", "stars",
            "stars_tokens", "stars_regress", "entities", "entities_tokens", "answer", "answer_tokens", "embed",
            "serving_default"} <= set(loaded.signatures)
    answer = loaded.signatures["tickets"](text=tf.constant(["my card was charged twice", "the page is slow"]))
    assert answer["probabilities"].shape == (2, 3)
    names = sorted(categories)  # the classes as the training file gave them
    assert [name.decode() for name in answer["class_name"].numpy()] == [names[i] for i in answer["label"].numpy()]
    pair = loaded.signatures["nli"](text_a=tf.constant(["a"]), text_b=tf.constant(["b"]))
    assert pair["class_name"].numpy()[0].decode() in ("contradiction", "entailment", "neutral")
    score = loaded.signatures["stars"](text=tf.constant(["fine", "slow page"]))["score"].numpy()
    assert np.all((score >= 1) & (score <= 5))
    example = tf.train.Example(features=tf.train.Features(feature={
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"refund please"]))}))
    classes = loaded.signatures["tickets_classify"](inputs=tf.constant([example.SerializeToString()]))
    assert [c.decode() for c in classes["classes"].numpy()[0]] == ["account", "billing", "bug"]

    # ...and the families' where only tensorflow and tensorflow_text are imported, answering as
    # the in-memory model does.
    sentences = read_training_file(model.task_specs["ner"], str(data / "ner-dev.txt"))[1].examples
    questions = read_training_file(model.task_specs["squad"], str(data / "squad-dev.json"))[1].examples
    texts = [" ".join(s.words) for s in sentences] + ["", "Anna  visited New York, and Maria stayed"]
    calls = {"entities": {"text": texts}, "answer": {"question": [q.question for q in questions],
                                                     "context": [q.context for q in questions]}}
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "load_export.py"), str(export_base / "1"),
                             str(tmp_path / "calls.json")], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"tickets", "entities", "entities_tokens", "answer", "answer_tokens"} <= set(loaded["signatures"])
    found = {key: np.array(value).reshape(len(texts), -1) for key, value in loaded["outputs"]["entities"].items()}
    words = [len(s.words) for s in sentences]
    assert [[tag or "O" for tag in row[:n]] for row, n in zip(found["word_tag"], words)] == \
        predict_examples(model, preprocessor, "ner", sentences)
    for served, count, row, kinds, starts, ends, scores in zip(
            texts, found["num_entities"][:, 0], found["entity_text"], found["entity_type"], found["entity_start"],
            found["entity_end"], found["entity_score"]):
        assert [served[s:e] for s, e in zip(starts[:count], ends[:count])] == list(row[:count])
        assert set(row[count:]) | set(kinds[count:]) <= {""} and set(starts[count:]) | set(ends[count:]) <= {-1}
        assert set(scores[count:]) <= {0.0} and all(kind in ("PER", "LOC") for kind in kinds[:count])
    answer = loaded["outputs"]["answer"]
    assert answer["answer"] == predict_examples(model, preprocessor, "squad", questions)
    assert [q.context[s:e] for q, s, e in zip(questions, answer["answer_start"], answer["answer_end"])] == \
        answer["answer"]
    assert all(0 < score <= 1 for score in answer["score"])


# --- A byte order mark (Excel's "CSV UTF-8") and the id column ------------------------------------

BOM = "\ufeff"


def test_a_byte_order_mark_is_not_part_of_the_first_column_in_any_format(tmp_path):
    tickets = Task("tickets", "classes", text="body", label="category", id="ticket_id")
    rows = [[f"T-{i}", text(i), ["billing", "bug"][i % 2]] for i in range(6)]
    id_first = write_csv(tmp_path / "ids.csv", [BOM + "ticket_id", "body", "category"], rows)
    _, result = read_training_file(tickets, id_first)
    assert [e.uid for e in result.examples[:2]] == ["T-0", "T-1"]  # not line numbers
    text_first = Task("tickets", "classes", text="body", label="category")
    tsv = write_csv(tmp_path / "body.tsv", [BOM + "body", "category"], [row[1:] for row in rows], delimiter="\t")
    assert len(read_training_file(text_first, tsv)[1].examples) == 6
    jsonl = tmp_path / "n.jsonl"
    jsonl.write_text(BOM + "".join(json.dumps({"body": text(i), "category": "ab"[i % 2]}) + "\n" for i in range(4)),
                     encoding="utf-8")
    assert len(read_training_file(text_first, str(jsonl))[1].examples) == 4
    conll = tmp_path / "bom.conll"
    conll.write_text(BOM + "-DOCSTART- -X- -X- O\n\nParis NNP B-NP B-LOC\nsleeps VBZ B-VP O\n", encoding="utf-8")
    task, result = read_training_file(Task("places", "tags"), str(conll))
    assert result.examples[0].words == ["Paris", "sleeps"] and task.settings.labels == ("O", "B-LOC", "I-LOC")
    squad = tmp_path / "bom.json"
    squad.write_text(BOM + open(write_squad(tmp_path / "plain.json", 2), encoding="utf-8").read(), encoding="utf-8")
    assert len(read_training_file(Task("qa", "span"), str(squad))[1].examples) == 2


def test_an_id_column_the_file_lacks_is_an_error_not_line_numbers(tmp_path):
    tickets = Task("tickets", "classes", text="body", label="category", id="ticket_id")
    rows = [[text(i), ["billing", "bug"][i % 2]] for i in range(6)]
    with pytest.raises(DataError, match=r"t.csv:1: header lacks column\(s\) \['ticket_id'\] for task 'tickets' "
                                        r"\(csv\). Header: \['body', 'category'\]"):
        read_training_file(tickets, write_csv(tmp_path / "t.csv", ["body", "category"], rows))
    with pytest.raises(DataError, match=r"t.jsonl:1: no key 'ticket_id' for task 'tickets'. Keys: \['body', "
                                        r"'category'\]"):
        read_training_file(tickets, write_jsonl(tmp_path / "t.jsonl", [{"body": "x", "category": "a"}]))


# --- A span task's window stride ------------------------------------------------------------------

def test_a_span_tasks_stride_is_derived_from_its_length_and_one_out_of_range_is_a_config_error(tmp_path, capsys):
    from conftest import TINY_VOCAB
    from kerasbert.finetuning.data import TaskPreprocessor
    from kerasbert.tokenization import make_tokenizer

    def stride(declaration, *overrides):
        config = load_config(FinetuneConfig, None, ["tasks=" + json.dumps({"myqa": declaration}), *overrides])
        graph = TaskPreprocessor(make_tokenizer(TINY_VOCAB), config.data.max_sequence_length).graph_of(
            config.tasks["myqa"])
        return graph.doc_stride

    # No doc_stride: the largest that skips no context, up to BERT's 128 (run_squad.py's, at 384).
    assert stride({"kind": "span", "sequence_length": 192}) == 125  # 192 - 64 (question) - 3
    assert stride({"kind": "span", "sequence_length": 384}) == 128
    assert stride({"kind": "span"}, "data.max_sequence_length=96") == 29  # the run's length
    assert stride({"kind": "span", "sequence_length": 192, "doc_stride": 64}) == 64
    with pytest.raises(ConfigError, match=r"^task 'myqa': doc_stride must be in \[1, 125\] at sequence_length 192 "
                                          r"\(sequence_length - max_query_length - 3; a longer stride would skip "
                                          r"context\). Received: doc_stride=128$"):
        stride({"kind": "span", "sequence_length": 192, "doc_stride": 128})
    with pytest.raises(ConfigError, match=r"^task 'myqa': doc_stride must be in \[1, 61\] at sequence_length 128 "):
        stride({"kind": "span", "doc_stride": 100})  # the run's data.max_sequence_length, 128
    with pytest.raises(ConfigError, match=r"^task 'myqa': sequence_length 64 leaves no room for context after a "
                                          r"question of max_query_length 64 \(and \[CLS\], \[SEP\], \[SEP\]\)"):
        stride({"kind": "span", "sequence_length": 64})
    config = tmp_path / "qa.json"
    config.write_text(json.dumps({"tasks": {"myqa": {"kind": "span", "sequence_length": 192, "doc_stride": 128}}}))
    result = run_main(["pipelines.finetune", "--config", str(config), "--output_dir", str(tmp_path / "run")], capsys)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: task 'myqa': doc_stride must be in [1, 125] at sequence_length 192 (sequence_length - "
        "max_query_length - 3; a longer stride would skip context). Received: doc_stride=128"]


def test_a_task_declared_without_a_dev_file_says_which_and_how_to_give_one(tmp_path):
    from kerasbert.finetuning.run import load_task_data

    train = write_csv(tmp_path / "t.csv", ["text", "label"], [[text(i), ["a", "b"][i % 2]] for i in range(40)])
    config = load_config(FinetuneConfig, None, ['tasks={"tickets": {"kind": "classes", "text": "text", '
                                                f'"label": "label", "train_file": "{train}"}}}}'])
    with pytest.raises(DataError, match=r"task 'tickets' has no dev_file: .* --set data.dev_files.tickets=PATH"):
        load_task_data(config, str(tmp_path))
