"""The shipped task declarations: each reads its shared files; they are declarations of the
same kind as a user's (trained, scored and exported as those are: test_declared_tasks.py). And
a declaration as config data: its family's settings flat beside its other keys."""

import dataclasses
import glob
import json
import os
import re

import numpy as np
import pytest

from conftest import DATA_DIR
from kerasbert.config import FinetuneConfig, load_config, to_dict
from kerasbert.data.cleaning import clean_review
from kerasbert.data.task_files import read_task_file
from kerasbert.export import serving_methods
from kerasbert.families.regression import ScoreSettings
from kerasbert.families.span_qa import SpanSettings
from kerasbert.families.tagging import TaggingSettings
from kerasbert.tasks import BUILTIN_TASKS as TASKS
from kerasbert.tasks import Task, TaskError, declare_tasks


def test_declarations_are_consistent():
    declare_tasks(list(TASKS))  # every shipped task in one run: no two share a signature name
    assert len({task.head for task in TASKS.values()}) == len(TASKS)
    methods = serving_methods(TASKS.values())
    assert methods["review_sentiment_classify"] == "tensorflow/serving/classify"
    assert methods["similarity_regress"] == "tensorflow/serving/regress"
    with pytest.raises(TaskError, match="kind must be one of"):
        Task("x", "ranking", text="a")
    with pytest.raises(TaskError, match="2 class names for 3 labels"):
        Task("x", "classes", text="a", labels=("1", "2", "3"), class_names=("a", "b"))
    with pytest.raises(TaskError, match=r"words must be one of \('spaces', 'punctuation'\)"):
        Task("x", "tags", settings=TaggingSettings(words="bert"))
    with pytest.raises(TaskError, match=r"doc_stride must be a positive integer, or 0 .*Received: -1"):
        Task("x", "span", settings=SpanSettings(doc_stride=-1))


# Every family's settings at their defaults, as every task had them before they were the
# families' (issue 68); doc_stride's was 128 before it came from the length.
EVERY_SETTING = {"sequence_length": 0, "doc_stride": 0, "max_query_length": 64, "max_answer_length": 30,
                 "max_windows": 16, "words": "spaces"}
# The sentence families' keys, Task's fields at their defaults until issue 86.
SENTENCE_KEYS = {"text": "", "text_a": "", "text_b": "", "label": "label", "id": "", "labels": [], "class_names": [],
                 "min_score": None, "max_score": None, "score_output": "sigmoid", "clean": "", "layouts": {}}


def test_a_setting_of_another_family_is_refused_by_name():
    with pytest.raises(TaskError, match=r"^task 'x': doc_stride is a span task's setting; a classes task has none$"):
        Task.from_config("x", {"kind": "classes", "text": "a", "doc_stride": 64})
    with pytest.raises(TaskError, match=r"^task 'x': words is a tags task's setting; a span task has none$"):
        Task.from_config("x", {"kind": "span", "words": "punctuation"})
    with pytest.raises(TaskError, match=r"^task 'sst': sequence_length is a tags or span task's setting; "
                                        r"a classes task has none$"):
        FinetuneConfig(tasks={"sst": {"sequence_length": 128}})
    with pytest.raises(TaskError, match=r"^task 'x': min_score is a score or pair_score task's setting; "
                                        r"a classes task has none$"):
        Task.from_config("x", {"kind": "classes", "text": "a", "min_score": 1})
    with pytest.raises(TaskError, match=r"^task 'x': class_names is a classes or pair_classes or pair_binary task's "
                                        r"setting; a score task has none$"):
        Task("x", "score", text="a", class_names=("low", "high"))
    with pytest.raises(TaskError, match=r"^task 'x': text is a .* task's setting; a tags task has none$"):
        Task.from_config("x", {"kind": "tags", "text": "sentence"})
    with pytest.raises(TaskError, match=r"^task 'x': a classes task's settings are a ClassificationSettings. "
                                        r"Received: SpanSettings\(sequence_length=0, "):
        Task("x", "classes", text="a", settings=SpanSettings())
    with pytest.raises(TaskError, match=r"unknown key\(s\) \['settings'\]"):  # configs declare them flat
        Task.from_config("x", {"kind": "span", "settings": {"doc_stride": 64}})


def test_an_old_declaration_with_every_familys_settings_at_their_defaults_loads(tmp_path):
    # config.json and model.keras of earlier runs: every task with every setting, at its default
    # where the task's family has none.
    for task in TASKS.values():
        old = {**task.to_config(), **EVERY_SETTING, **SENTENCE_KEYS, **task.to_config()}
        assert Task.from_config(task.name, old).settings == task.settings, task.name
    assert Task.from_config("ner", {**EVERY_SETTING, **SENTENCE_KEYS, "doc_stride": 128}).settings == TaggingSettings()
    (tmp_path / "config.json").write_text(json.dumps({"tasks": {
        "stars": {**EVERY_SETTING, **SENTENCE_KEYS, "kind": "score", "text": "review"},
        "people": {"kind": "tags", **EVERY_SETTING, **SENTENCE_KEYS, "words": "punctuation"},
        "squad": {**EVERY_SETTING, **SENTENCE_KEYS, "sequence_length": 384, "doc_stride": 128}}}))
    tasks = load_config(FinetuneConfig, str(tmp_path / "config.json")).tasks
    assert tasks["stars"].settings == ScoreSettings(text="review")
    assert tasks["people"].settings == TaggingSettings(words="punctuation")
    assert tasks["squad"].settings == SpanSettings(sequence_length=384, doc_stride=128)


def test_a_run_folders_config_written_at_2e558e8_loads_as_the_shipped_tasks():
    # tests/fixtures/config_2e558e8.json: config.json of `pipelines.finetune --config finetune_tiny` at
    # 2e558e8, when Task had every sentence key (text ... layouts) and HeadsConfig the sentence settings.
    config = load_config(FinetuneConfig, os.path.join(os.path.dirname(__file__), "fixtures", "config_2e558e8.json"))
    assert config.tasks == {name: TASKS[name] for name in ("sst", "para", "sts")}
    assert config.heads.pair_encoder == "bi" and config.train.total_steps == 60


def test_to_config_writes_only_the_familys_settings_flat_and_reads_back():
    qa = Task("qa", "span", settings=SpanSettings(sequence_length=192, doc_stride=64))
    written = {name: task.to_config() for name, task in {**TASKS, "qa": qa}.items()}
    for name, task in {**TASKS, "qa": qa}.items():
        assert Task.from_config(name, json.loads(json.dumps(written[name]))) == task, name
    assert not set(EVERY_SETTING) & set(written["sst"]) and "settings" not in written["sst"]
    assert {key: written["ner"][key] for key in EVERY_SETTING if key in written["ner"]} == \
        {"sequence_length": 0, "words": "spaces"}
    assert {key: written["qa"][key] for key in EVERY_SETTING if key in written["qa"]} == \
        {"sequence_length": 192, "doc_stride": 64, "max_query_length": 64, "max_answer_length": 30, "max_windows": 16}
    assert to_dict(FinetuneConfig(tasks={"qa": qa.to_config()}))["tasks"]["qa"] == written["qa"]  # config.json


def test_task_holds_what_every_task_has_and_nothing_outside_the_families_tests_a_family():
    assert [field.name for field in dataclasses.fields(Task)] == [
        "name", "kind", "train_file", "dev_file", "format", "head", "title", "settings"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    test = re.compile(r"is_family|is_classes|is_pair|\.kind (==|!=|in )|kind in \(")  # issue 86's grep
    hits = [f"{path}:{number}" for folder in ("kerasbert", "pipelines", "serving")
            for path in glob.glob(os.path.join(root, folder, "**", "*.py"), recursive=True)
            if not path.startswith(os.path.join(root, "kerasbert", "families", ""))
            for number, line in enumerate(open(path, encoding="utf-8"), 1) if test.search(line)]
    assert not hits


def test_review_text_is_unescaped():
    raw = ' """ Slow and "" "" reality TV "" "" , the soap .<br /><br />It \'s bad . """'
    assert clean_review(raw) == 'Slow and " reality TV " , the soap . It \'s bad .'
    assert clean_review(" A plain review . ") == "A plain review ."


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_every_declared_task_reads_its_shared_files():
    # GLUE's SST-2 is not in the shared data: test_readers and test_examples write their own.
    # The families' files (ner, squad): test_tagging.py and test_span_qa.py count them.
    for task in (task for task in TASKS.values() if task.name != "sst2" and not task.family.format):
        for path in (task.train_file, task.dev_file):
            result = read_task_file(task.name, os.path.join(DATA_DIR, path))
            assert len(result.examples) > 200 and result.skipped < 0.01 * len(result.examples), path
            labels = np.array([e.label for e in result.examples])
            if task.kind == "pair_score":
                assert labels.min() >= task.settings.min_score and labels.max() <= task.settings.max_score
            else:
                assert set(labels.astype(int)) == set(range(task.settings.num_classes)), path
    reviews = read_task_file("cfimdb", os.path.join(DATA_DIR, "cs224n", "cfimdb-dev.tsv")).examples
    assert len(reviews) == 245 and sum(e.label for e in reviews) == 122  # as the data README counts
    assert not any("<br />" in e.text_a or e.text_a.startswith('"""') or e.text_b for e in reviews)
