"""The shell recipes the docs give work as printed and give clean data."""

import json
import os
import re
import subprocess
import sys

from conftest import DATA_DIR, ROOT


def test_the_semantic_search_corpus_recipe_gives_questions_without_csv_quoting(tmp_path):
    text = open(os.path.join(ROOT, "docs", "training.md")).read()
    (recipe,) = re.findall(r"\n([^\n]*(?:\\\n[^\n]*)*> runs/questions\.txt[^\n]*)", text)
    recipe = (recipe.replace("../shared/data", DATA_DIR).replace("runs/questions.txt", str(tmp_path / "q.txt"))
              .replace("python ", f"{sys.executable} ", 1))
    subprocess.run(["bash", "-c", recipe], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                   capture_output=True, timeout=300)
    questions = (tmp_path / "q.txt").read_text().splitlines()
    assert len(questions) > 1900 and "What is a \"marginal benefit\"?" in questions
    assert not [q for q in questions if q.startswith('"') or '""' in q]


def test_the_readmes_own_tagger_and_reader_are_served_under_the_names_it_gives():
    """README, "Named entities and question answering": a declared tags or span task's
    signatures are named after the task, or after its `head`."""
    from kerasbert.tasks import declare_tasks

    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme[readme.index("## Named entities and question answering"):]
    section = section[:section.index("\n## ")]
    (declaration,) = [block for block in re.findall(r"```json\n(.*?)```", section, re.S) if '"tags"' in block]
    tasks = declare_tasks(json.loads(declaration)["tasks"])
    kinds = {task.kind: task for task in tasks.values()}
    tagger, reader = kinds["tags"], kinds["span"]
    assert f"serves `{tagger.signature_names[0]}` (text -> entities" in section
    assert f"and `{reader.signature_names[0]}` (question, context -> answer" in section
    named = declare_tasks({tagger.name: {**json.loads(declaration)["tasks"][tagger.name], "head": "entities"}})
    assert named[tagger.name].signature_names[0] == "entities" and '`"head": "entities"`' in section
    assert f"--signature {reader.signature_names[0]} --input question=" in section
