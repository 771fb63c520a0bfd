"""The shipped task declarations: each reads its shared files; they are declarations of the
same kind as a user's (trained, scored and exported as those are: test_declared_tasks.py)."""

import os

import numpy as np
import pytest

from conftest import DATA_DIR
from kerasbert.data.cleaning import clean_review
from kerasbert.data.task_files import read_task_file
from kerasbert.export import serving_methods
from kerasbert.families.span_qa_task import SpanSettings
from kerasbert.families.tagging_task import TaggingSettings
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
    with pytest.raises(TaskError, match="words is a tags task's setting; a classes task has none"):
        Task.from_config("x", {"kind": "classes", "text": "a", "words": "punctuation"})


def test_review_text_is_unescaped():
    raw = ' """ Slow and "" "" reality TV "" "" , the soap .<br /><br />It \'s bad . """'
    assert clean_review(raw) == 'Slow and " reality TV " , the soap . It \'s bad .'
    assert clean_review(" A plain review . ") == "A plain review ."


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_every_declared_task_reads_its_shared_files():
    # GLUE's SST-2 is not in the shared data: test_readers and test_examples write their own.
    # The families' files (ner, squad): test_tagging.py and test_span_qa.py count them.
    for task in (task for task in TASKS.values() if task.name != "sst2" and not task.is_family):
        for path in (task.train_file, task.dev_file):
            result = read_task_file(task.name, os.path.join(DATA_DIR, path))
            assert len(result.examples) > 200 and result.skipped < 0.01 * len(result.examples), path
            labels = np.array([e.label for e in result.examples])
            if task.kind == "pair_score":
                assert labels.min() >= task.min_score and labels.max() <= task.max_score
            else:
                assert set(labels.astype(int)) == set(range(task.num_classes)), path
    reviews = read_task_file("cfimdb", os.path.join(DATA_DIR, "cs224n", "cfimdb-dev.tsv")).examples
    assert len(reviews) == 245 and sum(e.label for e in reviews) == 122  # as the data README counts
    assert not any("<br />" in e.text_a or e.text_a.startswith('"""') or e.text_b for e in reviews)
