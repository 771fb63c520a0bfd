"""The shell recipes the docs give work as printed and give clean data."""

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
