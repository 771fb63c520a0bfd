"""Shared test helpers: a tiny vocabulary and corpus, small task files, and subprocess runners."""

import contextlib
import fcntl
import importlib
import json
import os
import subprocess
import sys

import pytest

from kerasbert.cpu_kernels import prefer_onednn
from tests.tiny_data import TINY_VOCAB, write_corpus  # noqa: F401 (tests import them from here)

prefer_onednn()  # in-process tests run TensorFlow's kernels as the pipelines do

# Scripts the tests (or make tfserving-tests) run in fresh processes: not test modules, nor doctests.
collect_ignore = ["load_export.py", "mirrored_step.py", "tf_text_regression_model.py", "tfserving_python"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.environ.get("KERASBERT_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))


def pytest_collection_modifyitems(items):
    """The `end_to_end` tests (a whole path in processes of their own, a minute or more each) lead
    both halves of the collection: `-n 2 --dist worksteal` hands each worker one half and steals
    from the ends, so each worker starts on half of them and no long test is left for last while
    the other core idles."""
    long, rest = [], []
    for item in items:
        (long if item.get_closest_marker("end_to_end") else rest).append(item)
    half = len(items) // 2 - (len(long) + 1) // 2
    items[:] = long[0::2] + rest[:half] + long[1::2] + rest[half:]


@contextlib.contextmanager
def built_once(tmp_path_factory, name: str):
    """A folder `name` that every xdist worker of this session shares, held under a lock while
    the caller looks in it: the first worker builds what it lacks, the others wait and find it
    built (for fixtures that cost a process run: read them, never change them)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/popen-gwK: the session's folder
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root / name


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random encoder with MiniLM's vocabulary, as a preset folder (test_declared_tasks, test_families)."""
    from kerasbert.config import ModelConfig
    from kerasbert.models.encoder import build_encoder, minilm_checkpoint
    from kerasbert.tokenization import load_tokenizer

    checkpoint = tmp_path_factory.mktemp("tiny") / "encoder"
    build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=16, num_heads=2), 30522) \
        .save_to_preset(str(checkpoint))
    load_tokenizer(minilm_checkpoint()).save_to_preset(str(checkpoint))
    return str(checkpoint)


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
    """A tiny random fine-tuning run (pairs as one packed sequence) and its SavedModel, made
    once per test process: (run folder, version folder). Tests read them; one that changes
    an export copies it first."""
    from helpers import tiny_model_dir
    from kerasbert.export import export_saved_model

    folder = tmp_path_factory.mktemp("tiny_export")
    tiny_model_dir(str(folder / "run"), "cross")
    return str(folder / "run"), export_saved_model(str(folder / "run"), str(folder / "exports"))


@pytest.fixture(scope="session")
def tiny_families(tmp_path_factory):
    """A tiny random `entities` and `answer` export (tests/helpers.py tiny_families_export),
    made once per test process for every test that serves, batches or loads it: (version folder
    `<base>/families/1`, the in-memory model's {"entities", "answer"} functions). Read it; a
    test that changes it copies it first."""
    from helpers import tiny_families_export

    path = tmp_path_factory.mktemp("tiny_families") / "families" / "1"
    return str(path), tiny_families_export(path)


# The demo on a tiny budget: its own vocabulary and pretraining on a few paragraphs, then
# fine-tuning (two blocks, a weight average on) on the first rows of the shared task files.
TINY_DEMO = ["--init_checkpoint", "pretrained", "--eval_examples", "64",
             "--set", "pretrain.data.vocab_size=1000", "--set", "pretrain.data.heldout_examples=32",
             "--set", "pretrain.train.total_steps=10", "--set", "pretrain.train.steps_per_block=10",
             "--set", "finetune.data.max_train_examples=64", "--set", "finetune.data.max_dev_examples=32",
             "--set", "finetune.train.batch_size=8", "--set", "finetune.train.total_steps=20",
             "--set", "finetune.train.steps_per_block=10", "--set", "finetune.train.ema_momentum=0.9"]


def wikitext_paragraphs(path, count=150):
    """The first paragraphs of WikiText-2 as a small plain-text corpus (real text, quick to learn a
    vocabulary from: the whole file takes half a minute)."""
    with open(os.path.join(DATA_DIR, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        paragraphs = [line.strip() for line in f if len(line.strip()) > 80][:count]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """`python -m pipelines.demo` end to end on TINY_DEMO, run once per session (in a pytest
    worker, its TensorFlow already loaded: what is checked is the path and the child server the
    demo starts and stops, not the demo's own process). Its fine-tuning trains on
    `small_task_files(train_rows=64, dev_rows=32)`: (folder holding `run/`, `exports/` and
    `files.json`, the demo's exit code and output as `run_main` returns them). test_demo checks
    the demo; other tests read its runs and export, never change them."""
    with built_once(tmp_path_factory, "demo") as folder:
        if not (folder / "result.json").exists():
            _run_demo(folder)
        result = json.loads((folder / "result.json").read_text())
    return folder, subprocess.CompletedProcess(["pipelines.demo"], result["returncode"], result["stdout"],
                                               result["stderr"])


def _run_demo(folder):
    import io
    import signal

    folder.mkdir(exist_ok=True)
    corpus = wikitext_paragraphs(folder / "corpus.txt")
    files = small_task_files(folder, train_rows=64, dev_rows=32)
    (folder / "files.json").write_text(json.dumps(files))
    args = ["pipelines.demo", "--data_dir", DATA_DIR, "--output_dir", str(folder / "run"),
            "--export_base", str(folder / "exports"), "--set", f"pretrain.data.sources={corpus}",
            # held out from the same paragraphs: tokenizing all of WikiText-2's test set takes seconds
            "--set", f"pretrain.data.heldout_source={corpus}", *TINY_DEMO]
    for override in task_files_overrides(files):
        args += ["--set", f"finetune.{override}"]
    out, err = io.StringIO(), io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)  # the demo makes SIGTERM unwind like Ctrl-C
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _main_exit_code(args)
    finally:
        signal.signal(signal.SIGTERM, handler)
    (folder / "result.json").write_text(json.dumps({"returncode": code, "stdout": out.getvalue(),
                                                    "stderr": err.getvalue()}))


@pytest.fixture
def tiny_tokenizer():
    from kerasbert.tokenization import make_tokenizer
    return make_tokenizer(TINY_VOCAB)


def without_tensorflow(folder) -> dict:
    """The environment of a process that must answer without loading TensorFlow: a `tensorflow`
    package first on its path ends it at import (kerasbert's quiet import hides what
    `-X importtime` would show)."""
    package = os.path.join(folder, "tensorflow")
    os.makedirs(package, exist_ok=True)
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write("raise SystemExit('test: TensorFlow was imported')\n")
    return {"PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}


def run_module(args, env=None, timeout=600, check=True):
    """Runs `python -m ...` in a fresh process from the project root."""
    full_env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    result = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=full_env,
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def _main_exit_code(args) -> int:
    try:
        return importlib.import_module(args[0]).main(list(args[1:]))
    except SystemExit as exit:  # argparse's errors
        return exit.code


def run_main(args, capsys, check=False):
    """Runs `python -m <args>`'s `main()` in this process, where TensorFlow and the project are
    already loaded: for runs whose own process is not what the test checks. Returns what
    `run_module` returns; `check` fails the test on a non-zero exit, as `run_module` does."""
    code = _main_exit_code(args)
    out = capsys.readouterr()
    if check and code != 0:
        raise AssertionError(f"{args} exited {code}\n{out.out[-3000:]}\n{out.err[-3000:]}")
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def small_task_files(tmp_path, train_rows=64, dev_rows=40, tasks=("sst", "para", "sts")):
    """The first rows of the declared tasks' shared files (plus the header), as a test's own
    data: {"<task>_<split>": path}."""
    from kerasbert.tasks import BUILTIN_TASKS as TASKS

    names = {}
    for task in tasks:
        for split, rows in (("train", train_rows), ("dev", dev_rows)):
            source = getattr(TASKS[task], f"{split}_file")
            with open(os.path.join(DATA_DIR, source), encoding="utf-8") as f:
                lines = [next(f) for _ in range(rows + 1)]
            path = tmp_path / os.path.basename(source)
            path.write_text("".join(lines), encoding="utf-8")
            names[f"{task}_{split}"] = str(path)
    return names


def task_files_config(files) -> dict:
    """`small_task_files` as the data section's `train_files` and `dev_files`."""
    section = {"train_files": {}, "dev_files": {}}
    for key, path in files.items():
        task, split = key.rsplit("_", 1)
        section[f"{split}_files"][task] = path
    return section


def task_files_overrides(files) -> list[str]:
    """`small_task_files` as `--set data.<split>_files.<task>=<path>` overrides."""
    return [f"data.{section}.{task}={path}" for section, paths in task_files_config(files).items()
            for task, path in paths.items()]


# --- No test file leaves a thread behind -------------------------------------------------------
# In-process servers (serving_helpers.Server, ModelManager, BatchingSession, RestServer, gRPC
# servers and channels) run threads in the pytest worker. One left running holds its models,
# its pools and their memory for the rest of the session: each file must stop what it starts.
# Counted: threads running the project's code (its packages, the tests' modules) or grpc's;
# other libraries' pools (TensorFlow's, Beam's) are theirs to keep. Threads that
# session-scoped fixtures start live as long as the session, and are not counted.

_threads_of_session_fixtures: set[int] = set()
_threads_before_module: dict[str, set[int]] = {}
_OWN_CODE = ("serving", "kerasbert", "pipelines", "benchmarks", "tests", "grpc", "helpers", "conftest", "test_")


def _live_threads() -> dict[int, str]:
    """{ident: "name (the module.function it runs)"} of each live thread running the project's
    code or grpc's."""
    import threading

    threads = {}
    for thread in threading.enumerate():
        target = getattr(thread, "_target", None)
        module = getattr(target, "__module__", None) or ""
        if thread.is_alive() and module.startswith(_OWN_CODE):
            threads[thread.ident] = f"{thread.name} ({module}.{getattr(target, '__qualname__', '?')})"
    return threads


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = set(_live_threads()) if fixturedef.scope == "session" else None
    yield
    if before is not None:
        _threads_of_session_fixtures.update(set(_live_threads()) - before)


def _file_of(item) -> str:
    return item.nodeid.split("::")[0]


def pytest_runtest_setup(item):
    _threads_before_module.setdefault(_file_of(item), set(_live_threads()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    module = _file_of(item)
    if nextitem is not None and _file_of(nextitem) == module:
        return  # the module's own fixtures are still up
    before = _threads_before_module.pop(module, None)
    if before is None:
        return
    import time

    deadline = time.monotonic() + 5  # a thread told to stop gets a moment to end
    while True:
        left = {ident: name for ident, name in _live_threads().items()
                if ident not in before and ident not in _threads_of_session_fixtures}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        raise AssertionError(f"{module} left {len(left)} thread(s) running after its tests and fixtures ended: "
                             f"{sorted(set(left.values()))}")
