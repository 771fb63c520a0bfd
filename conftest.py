"""What the docstring examples of kerasbert/, pipelines/ and serving/ are given
(`pytest --doctest-modules kerasbert pipelines serving`): the names below that an example reads
before it assigns them, each made once per session, and `tmp_path`, a folder of the docstring's
own. Nothing is built, nor TensorFlow imported, for a docstring that uses none of them.

Plain files (no TensorFlow):
- vocabulary: tests/tiny_data.py's 15-token WordPiece vocabulary (a list of strings)
- vocab_file: that vocabulary as a vocab.txt
- corpus_file: a plain-text corpus of that vocabulary's words (blank-line separated documents)
- sentences_file: a text file of 4 sentences, one a line
- conll_file, squad_file: a 2-sentence CoNLL-2003 file and a 2-question SQuAD v1.1 file
- pretrain_config: a PretrainConfig that trains a 1-layer, hidden-8 encoder for 2 steps (1 block) on
  a 40-document corpus of `vocabulary` (vocab.txt, corpus and held-out files of its own), 16 tokens
  a sequence, 4 masked, batches of 4
- data_dir: the shared data folder (../shared/data, or KERASBERT_DATA_DIR); an example that
  reads it is skipped where it is not
- hf_checkpoint, hf_ner_checkpoint: tiny transformers checkpoint folders (tests/hf_checkpoints.py):
  a BertForSequenceClassification (negative, positive) and a BertForTokenClassification
Tiny models (random weights; 1 layer, hidden 8, 16 tokens a sequence):
- tokenizer: the uncased WordPiece tokenizer over `vocabulary`
- encoder: a keras-hub BertBackbone over it
- run_dir: a fine-tuning run folder (tests/helpers.py tiny_model_dir): sst, para, sts, [CLS] pooling
- export_dir: its SavedModel version folder (kerasbert.export.export_saved_model)
- model, preprocessor: a MultitaskBert with sst, para, sts, ner and squad heads and its
  TaskPreprocessor (tests/helpers.py tiny_tasks_run, loaded back)
serving/'s (tests/serving_models.py):
- toy_models: a base path whose version 1 is save_toy's model (y = 2 x; signatures
  serving_default, strings, pair, classify, regress) with one warm-up Predict request
- servable: that version, loaded (serving.servable.Servable)
- manager: a started serving.manager.ModelManager serving it as model "toy"
- half_plus_two_tflite: a version folder holding only a model.tflite (y = 0.5 x + 2)
- server: a child `python -m serving` (serving.process.LocalServer) serving toy_models as model
  "toy", its version 1 loaded; `server.rest_port`, `server.grpc_port`
"""

import ast
import json
import os

import pytest

NAMES = ("toy_models", "servable", "manager", "server", "half_plus_two_tflite", "tmp_path", "vocabulary", "vocab_file",
         "corpus_file", "sentences_file", "pretrain_config", "data_dir", "conll_file", "squad_file", "hf_checkpoint", "hf_ner_checkpoint",
         "tokenizer", "encoder", "run_dir", "export_dir", "model", "preprocessor")

SENTENCES = ["the cat sat on the mat .", "the dog ran fast .", "cats sat", "the dogs ran on the mat"]


# --- plain files -------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def example_vocabulary():
    from tests.tiny_data import TINY_VOCAB
    return list(TINY_VOCAB)


@pytest.fixture(scope="session")
def example_vocab_file(tmp_path_factory, example_vocabulary):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(example_vocabulary) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def example_corpus_file(tmp_path_factory):
    from tests.tiny_data import write_corpus
    return write_corpus(str(tmp_path_factory.mktemp("corpus") / "corpus.txt"), num_documents=10)


@pytest.fixture(scope="session")
def example_sentences_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sentences") / "sentences.txt"
    path.write_text("".join(f"{sentence}\n" for sentence in SENTENCES), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def example_data_dir():
    path = os.environ.get("KERASBERT_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "shared", "data"))
    if not os.path.isdir(path):
        pytest.skip(f"{path}: no shared data")
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def example_conll_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("conll") / "dev.txt"
    rows = [("-DOCSTART-", "-X-", "-X-", "O"), None, ("the", "DT", "B-NP", "O"), ("cat", "NN", "I-NP", "B-ANIMAL"),
            ("sat", "VBD", "B-VP", "O"), None, ("dogs", "NNS", "B-NP", "B-ANIMAL"), ("ran", "VBD", "B-VP", "O"),
            ("on", "IN", "B-PP", "O"), ("the", "DT", "B-NP", "O"), ("mat", "NN", "I-NP", "B-LOC"), None]
    path.write_text("".join(" ".join(row) + "\n" if row else "\n" for row in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def example_squad_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("squad") / "dev.json"
    context = "the cat sat on the mat . the dog ran fast ."
    questions = [("q1", "who sat", "the cat"), ("q2", "who ran", "the dog")]
    qas = [{"id": uid, "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}
           for uid, question, answer in questions]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "pets", "paragraphs": [
        {"context": context, "qas": qas}]}]}), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def example_pretrain_config(tmp_path_factory, example_vocab_file):
    from kerasbert.config import PretrainConfig, load_config
    from tests.tiny_data import write_corpus

    folder = tmp_path_factory.mktemp("pretrain")
    corpus = write_corpus(str(folder / "corpus.txt"))
    heldout = write_corpus(str(folder / "heldout.txt"), num_documents=4, seed=1)
    return load_config(PretrainConfig, None, [
        "model.preset=custom", "model.num_layers=1", "model.hidden_dim=8", "model.num_heads=2",
        "model.max_sequence_length=16", f"data.sources={corpus}", f"data.heldout_source={heldout}",
        f"data.vocab_file={example_vocab_file}", "data.heldout_examples=4", "data.mask_selection_length=4",
        "train.batch_size=4", "train.total_steps=2", "train.steps_per_block=2"])


@pytest.fixture(scope="session")
def example_hf_checkpoint(tmp_path_factory):
    from tests.hf_checkpoints import write_checkpoint

    folder = str(tmp_path_factory.mktemp("hf") / "bert-sst2")
    write_checkpoint(folder, "BertForSequenceClassification", labels=["negative", "positive"])
    return folder


@pytest.fixture(scope="session")
def example_hf_ner_checkpoint(tmp_path_factory):
    from tests.hf_checkpoints import TAGS, write_checkpoint

    folder = str(tmp_path_factory.mktemp("hf") / "bert-conll")
    write_checkpoint(folder, "BertForTokenClassification", labels=TAGS)
    return folder


# --- tiny models ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def example_tokenizer(example_vocabulary):
    from kerasbert.tokenization import make_tokenizer
    return make_tokenizer(example_vocabulary)


@pytest.fixture(scope="session")
def example_encoder(example_vocabulary):
    import keras

    from kerasbert.config import ModelConfig
    from kerasbert.models.encoder import build_encoder

    keras.utils.set_random_seed(1)
    return build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2),
                         len(example_vocabulary))


@pytest.fixture(scope="session")
def example_run_dir(tmp_path_factory):
    from tests.helpers import tiny_model_dir

    path = str(tmp_path_factory.mktemp("runs") / "finetune")
    tiny_model_dir(path, "cross", pooling="cls")
    return path


@pytest.fixture(scope="session")
def example_export_dir(tmp_path_factory, example_run_dir):
    from kerasbert.export import export_saved_model
    return export_saved_model(example_run_dir, str(tmp_path_factory.mktemp("saved_models") / "kerasbert"))


@pytest.fixture(scope="session")
def _tasks_model(tmp_path_factory):
    from kerasbert.finetuning.load import load_finetuned
    from tests.helpers import tiny_tasks_run

    return load_finetuned(tiny_tasks_run(str(tmp_path_factory.mktemp("runs") / "tasks")))[1:]


@pytest.fixture(scope="session")
def example_model(_tasks_model):
    return _tasks_model[0]


@pytest.fixture(scope="session")
def example_preprocessor(_tasks_model):
    return _tasks_model[1]


# --- serving/'s ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def example_toy_models(tmp_path_factory):
    import numpy as np

    from kerasbert.warmup_requests import predict_request, write_warmup_requests
    from tests.serving_models import save_toy

    base = tmp_path_factory.mktemp("toy")
    save_toy(str(base / "1"), scale=2.0)
    write_warmup_requests(str(base / "1"), [predict_request("serving_default", {"x": np.ones((1, 2), np.float32)})])
    return str(base)


@pytest.fixture(scope="session")
def example_servable(example_toy_models):
    from serving.servable import Servable

    servable = Servable("toy", 1, f"{example_toy_models}/1")
    yield servable
    servable.close()


@pytest.fixture(scope="session")
def example_manager(example_toy_models):
    from serving.manager import ModelManager
    from serving.source import ModelConfig

    manager = ModelManager([ModelConfig(name="toy", base_path=example_toy_models, model_platform="tensorflow")])
    manager.start()
    yield manager
    manager.stop()


@pytest.fixture(scope="session")
def example_server(tmp_path_factory, example_toy_models):
    from serving.process import LocalServer

    log_path = str(tmp_path_factory.mktemp("server") / "server.log")
    with LocalServer("toy", example_toy_models, log_path=log_path) as server:
        server.wait_for_version(1)
        yield server


@pytest.fixture(scope="session")
def example_half_plus_two_tflite(tmp_path_factory):
    from tests.serving_models import save_half_plus_two_tflite

    path = str(tmp_path_factory.mktemp("half_plus_two_tflite") / "123")
    save_half_plus_two_tflite(path)
    return path


@pytest.fixture
def example_tmp_path(tmp_path):
    return tmp_path


def read_before_assigned(examples) -> set[str]:
    """The names a docstring's examples read before one of them assigns them (an example that
    builds its own `model` does not get, nor wait for, the shared one)."""
    assigned, read = set(), set()
    for example in examples:
        try:
            tree = ast.parse(example.source)
        except SyntaxError:
            continue
        names = [node for node in ast.walk(tree) if isinstance(node, ast.Name)]
        read |= {node.id for node in names if isinstance(node.ctx, ast.Load)} - assigned
        assigned |= {node.id for node in names if isinstance(node.ctx, ast.Store)}
    return read


@pytest.fixture(autouse=True)
def _example_names(request, doctest_namespace):
    """A docstring's examples get the NAMES they read (and their module does not define), and no others."""
    test = getattr(request.node, "dtest", None)  # a DoctestItem's
    if test is None:
        return
    for name in NAMES:
        doctest_namespace.pop(name, None)
    for name in sorted(read_before_assigned(test.examples).intersection(NAMES) - set(test.globs)):
        doctest_namespace[name] = request.getfixturevalue(f"example_{name}")

