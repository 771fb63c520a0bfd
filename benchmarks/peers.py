"""kerasbert against Hugging Face `transformers` on PyTorch (benchmarks/peer_torch.py, in
.venv-peer), on the same inputs in the same run; docs/benchmarks.md tells what the figures mean.

    make bench-peers      # makes .venv-peer (torch, transformers), then runs this
    python -m benchmarks.peers --output_dir runs/bench-peers --peer_python .venv-peer/bin/python [--parts ...]

Parts, each in a process of its own and each its entry of results.json:
    pretrain        BertPretrainer and BertForPreTraining from the same weights on the batches
                    kerasbert's pipeline makes for pretrain_mini.json (inputs/), the same AdamW,
                    schedule and clipping; held-out MLM and NSP accuracy after every block ->
                    pretrain_curves.png. A run a process, `--jobs` side by side, each going on from
                    its last block when stopped; `kerasbert-no-xla` is a control for float rounding.
    pretrain_speed  tokens/s of both training steps on those batches.
    finetune_speed  examples/s of fine-tuning MiniLM on SST-5, at each of --finetune_batch_sizes: the
                    same packed batches (each cut to its longest sentence, at most 128 tokens),
                    kerasbert's `MultitaskBert` in `model.fit` (the run's defaults: the unpadded
                    encoder, no XLA) against `BertForSequenceClassification` in a PyTorch loop, both
                    with AdamW and clipping as FinetuneConfig's defaults say.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from benchmarks.peer_protocol import FIELDS, heldout_scores, load_rows, read_json, save_rows, write_json
from benchmarks.pretrain import time_steps
from benchmarks.results import (PEER, ROOT, bench_parser, check_peer_python, compared, load_results, peer_training,
                                plot_panels, render_markdown, run_peer, save_results)
from kerasbert.config import FinetuneConfig, PretrainConfig, load_config
from kerasbert.console import stage
from kerasbert.data.corpus import load_labelled_corpora
from kerasbert.data.task_files import load_examples
from kerasbert.finetuning.data import TaskPreprocessor, task_dataset
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.hf.exporting import pretrainer_weights
from kerasbert.models.encoder import load_encoder, minilm_checkpoint
from kerasbert.models.pretrainer import pretraining_compile_args
from kerasbert.pretraining.dataset import examples_dataset
from kerasbert.pretraining.inputs import (heldout_batches, heldout_pairs, tokenize_documents, training_batches,
                                          training_pairs)
from kerasbert.pretraining.run import build_model, resolve_tokenizer, set_mlm_bias, unigram_log_prior
from kerasbert.tasks import get_task
from kerasbert.tokenization import load_tokenizer
from kerasbert.training.backup import BlockWeights, find_backup, restore
from kerasbert.training.optim import make_optimizer

TITLE = "kerasbert against transformers (PyTorch), same inputs, same run"  # of results.md
CONFIG = "pipelines/configs/pretrain_mini.json"
KERAS_INPUTS = ("token_ids", "segment_ids", "padding_mask", "mask_positions")


def pretraining_inputs(args) -> tuple:
    """(the config at --steps, the inputs folder, what kerasbert's models need: `prepare_pretraining`)."""
    config = load_config(PretrainConfig, args.config)
    if args.steps:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, total_steps=args.steps))
    inputs = os.path.join(args.output_dir, "inputs")
    return config, inputs, prepare_pretraining(config, args.data_dir, inputs)


def rows_of(dataset) -> dict[str, np.ndarray]:
    """Keras (x, y, sample_weight) pretraining batches as rows (peer_protocol's layout)."""
    batches = [{**{name: x[name] for name in KERAS_INPUTS}, "mask_ids": y["mlm"], "mask_weights": weights["mlm"],
                "nsp_labels": y["nsp"], "nsp_weights": weights["nsp"]} for x, y, weights in dataset.as_numpy_iterator()]
    return {name: np.concatenate([b[name] for b in batches]).astype(np.float32 if name.endswith("weights") else np.int32)
            for name in FIELDS}


def keras_batches(rows: dict[str, np.ndarray], batch_size: int):
    """Rows as the Keras (x, y, sample_weight) batches they were, in order."""
    x = {name: rows[name] for name in KERAS_INPUTS}
    y = {"mlm": rows["mask_ids"], "nsp": rows["nsp_labels"]}
    weights = {"mlm": rows["mask_weights"], "nsp": rows["nsp_weights"]}
    return tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(batch_size, drop_remainder=True)


def prepare_pretraining(config, data_dir: str, inputs: str) -> dict:
    """Writes inputs/train.npz (total_steps batches of kerasbert's pipeline) and heldout.npz
    once, and peer_config.json; returns what kerasbert's models need: {"tokenizer", "prior"}."""
    os.makedirs(inputs, exist_ok=True)
    # Seeded as the pretraining run seeds itself before it builds its data (RunFolder): the
    # masks' random ops otherwise draw from a seed that changes from one process to the next.
    keras.utils.set_random_seed(config.train.seed)
    documents, sources = load_labelled_corpora(config.data.sources, data_dir)
    tokenizer = resolve_tokenizer(config, documents, None, inputs)  # trains inputs/vocab.txt once
    tokenized = tokenize_documents(tokenizer, documents)
    train_path = os.path.join(inputs, "train.npz")
    if not os.path.exists(train_path):
        stage(f"writing {config.train.total_steps} training batches of kerasbert's pipeline to {train_path}")
        batches = training_batches(config, tokenizer, examples_dataset(training_pairs(config, tokenized, sources)))
        save_rows(os.path.join(inputs, "heldout.npz"),
                  rows_of(heldout_batches(config, tokenizer, heldout_pairs(config, tokenizer, data_dir))))
        save_rows(train_path + ".partial.npz", rows_of(batches.take(config.train.total_steps)))
        os.replace(train_path + ".partial.npz", train_path)
    model, train = config.model, config.train
    if train.schedule != "linear" or train.ema_momentum or train.mixed_precision:
        raise ValueError("the peer matches a linear schedule in float32 without EMA; "
                         f"the config asks for schedule={train.schedule}, ema_momentum={train.ema_momentum}, "
                         f"mixed_precision={train.mixed_precision}")
    write_json(os.path.join(inputs, "peer_config.json"), {  # runs being started may read it
        "model": {"vocab_size": tokenizer.vocabulary_size(), "hidden_size": model.hidden_dim,
                  "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_heads,
                  "intermediate_size": model.intermediate_dim, "dropout": model.dropout,
                  "max_position_embeddings": max(model.max_sequence_length, 512),  # build_encoder's table
                  "mlm_head_layer_norm_eps": 1e-5},
        "train": {**peer_training(train), "nsp_loss_weight": config.data.nsp_loss_weight}})
    return {"tokenizer": tokenizer, "prior": unigram_log_prior(tokenized, tokenizer.vocabulary_size())}


def initial_pretrainer(config, side: dict, seed: int, jit_compile: bool | None = None):
    """The pretrainer kerasbert's run starts from with `seed` (positions, MLM bias as the config
    asks), compiled as the run compiles it (XLA: the config's unless given)."""
    keras.utils.set_random_seed(seed)
    model = build_model(config, side["tokenizer"].vocabulary_size(), None)
    if config.data.mlm_bias_prior:
        set_mlm_bias(model, side["prior"])
    model.compile(**pretraining_compile_args(model, make_optimizer(config.train), config.train.jit_compile
                                             if jit_compile is None else jit_compile, config.data.nsp_loss_weight))
    return model


def initial_weights_file(config, side: dict, inputs: str, seed: int) -> str:
    """inputs/init-SEED.npz, written once: kerasbert's initial weights under Hugging Face's names."""
    path = os.path.join(inputs, f"init-{seed}.npz")
    if not os.path.exists(path):
        np.savez(path, **pretrainer_weights(initial_pretrainer(config, side, seed)))
    return path


def kerasbert_heldout(model, heldout: dict, batch_size: int) -> dict:
    predictions = model.predict(keras_batches(heldout, batch_size).map(lambda x, y, w: x), verbose=0)
    return heldout_scores(predictions["mlm"], predictions["nsp"], heldout)


def train_kerasbert(config, side: dict, inputs: str, seed: int, state_dir: str, jit_compile: bool | None) -> dict:
    """kerasbert's pretrainer on inputs/train.npz (`initial_pretrainer`); held-out scores
    before training and after every block. The blocks so far (blocks.json) and a backup are
    written to `state_dir` after every block, and the run resumes from them."""
    train, blocks_file = config.train, os.path.join(state_dir, "blocks.json")
    blocks = read_json(blocks_file) if os.path.exists(blocks_file) else []
    if len(blocks) == train.num_blocks + 1:  # finished (its backups were removed at the end)
        return {"blocks": blocks, "complete": True}
    os.makedirs(state_dir, exist_ok=True)
    model = initial_pretrainer(config, side, seed, jit_compile)
    heldout = load_rows(os.path.join(inputs, "heldout.npz"))
    backup = find_backup(os.path.join(state_dir, "backup"))
    start_block = backup.blocks_done if backup else 0
    # The blocks the backup holds: one written just before a kill, without its backup, goes.
    blocks = [b for b in blocks if b["step"] <= start_block * train.steps_per_block]
    if backup is None or not blocks:
        start_block, blocks = 0, [{"step": 0, **kerasbert_heldout(model, heldout, train.batch_size)}]
        print(f"kerasbert seed {seed}: step 0 {blocks[0]}", flush=True)
    else:
        restore(model, backup)
        print(f"kerasbert seed {seed}: resuming after step {blocks[-1]['step']} from {backup.path}", flush=True)
    clock = {"train_seconds": blocks[-1].get("train_seconds", 0.0)}

    class Blocks(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            clock["started"] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            clock["train_seconds"] += time.perf_counter() - clock["started"]
            blocks.append({"step": (epoch + 1) * train.steps_per_block, "train_loss": float(logs["loss"]),
                           "train_seconds": clock["train_seconds"],
                           **kerasbert_heldout(self.model, heldout, train.batch_size)})
            print(f"kerasbert seed {seed}: {blocks[-1]}", flush=True)
            write_json(blocks_file, blocks)

    data = keras_batches(load_rows(os.path.join(inputs, "train.npz")), train.batch_size)
    model.fit(data.skip(start_block * train.steps_per_block), initial_epoch=start_block, epochs=train.num_blocks,
              steps_per_epoch=train.steps_per_block, verbose=0,
              callbacks=[Blocks(), BlockWeights(os.path.join(state_dir, "backup"))])
    return {"blocks": blocks, "complete": True}


# The pretrain part's runs per seed: their line in the plot, XLA for kerasbert's (None: as the config says).
IMPLEMENTATIONS = {"kerasbert": ("-", None), "transformers": ("--", None), "kerasbert-no-xla": (":", False)}


def pretrain_runs(args) -> list[str]:
    """The pretrain part's runs: `implementation/seed`."""
    return [f"{implementation}/{seed}" for seed in args.seeds for implementation in args.implementations]


def run_paths(args, key: str) -> tuple[str, str]:
    """(results file, resume state) of one run under OUTPUT_DIR/pretrain/."""
    name = os.path.join(args.output_dir, "pretrain", key.replace("/", "-"))
    return name + ".json", name + (".state" if key.startswith("kerasbert") else ".state.pt")


def run_command(args, key: str) -> list[str]:
    """The process that trains one run: this module with `--run`, or the peer's in its environment."""
    implementation, seed = key.split("/")
    output, state = run_paths(args, key)
    inputs = os.path.join(args.output_dir, "inputs")
    if implementation.startswith("kerasbert"):
        return [*part_command(args, "pretrain"), "--run", key]
    check_peer_python(args.peer_python)
    return [args.peer_python, "-m", PEER, "pretrain", "--inputs", inputs,
            "--init", os.path.join(inputs, f"init-{seed}.npz"), "--seed", seed, "--state", state, "--output", output]


def run_environment(args) -> dict:
    """Each of the `--jobs` runs side by side gets its share of the cores as threads (two runs
    of two threads each on two cores ran 3-7x slower)."""
    threads = str(max(1, (os.cpu_count() or 1) // args.jobs))
    return {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": threads, "TF_NUM_INTRAOP_THREADS": threads,
            "TF_NUM_INTEROP_THREADS": threads}


def collect_runs(args, part: dict) -> None:
    """Each run's blocks so far: from its results file, or from a kerasbert run's state (it
    writes its results file only when it ends)."""
    for key in pretrain_runs(args):
        output, state = run_paths(args, key)
        if os.path.exists(output):
            part["runs"][key] = read_json(output)
        elif key.startswith("kerasbert") and os.path.exists(os.path.join(state, "blocks.json")):
            part["runs"][key] = {"blocks": read_json(os.path.join(state, "blocks.json")), "complete": False}


def part_pretrain(args, results: dict) -> None:
    """Every unfinished run in a process of its own, `--jobs` at a time; the results are
    written whenever a run finishes a block."""
    config, inputs, side = pretraining_inputs(args)
    if args.run:  # one kerasbert run, in the process `run_command` started
        implementation, seed = args.run.split("/")
        output, state = run_paths(args, args.run)
        write_json(output, train_kerasbert(config, side, inputs, int(seed), state, IMPLEMENTATIONS[implementation][1]))
        return
    os.makedirs(os.path.join(args.output_dir, "pretrain"), exist_ok=True)
    for seed in args.seeds:
        initial_weights_file(config, side, inputs, seed)
    part = results["pretrain"] = {"config": args.config, "steps": config.train.total_steps, "runs": {},
                                  "batch_size": config.train.batch_size,
                                  "sequence_length": config.model.max_sequence_length}
    collect_runs(args, part)
    waiting = [key for key in pretrain_runs(args) if not part["runs"].get(key, {}).get("complete")] if args.jobs else []
    running, failed = {}, []
    while waiting or running:
        while waiting and len(running) < args.jobs:
            key = waiting.pop(0)
            print(f"== pretraining run {key}", flush=True)
            running[key] = subprocess.Popen(run_command(args, key), cwd=ROOT, env=run_environment(args))
        time.sleep(5)
        for key, process in list(running.items()):
            if process.poll() is not None:
                del running[key]
                if process.returncode:
                    failed.append(f"{key} (exit {process.returncode})")
        seen = dict(part["runs"])  # collect_runs puts new entries in, never changes one
        collect_runs(args, part)
        if part["runs"] != seen:
            save(args, results)
    if failed:
        raise RuntimeError(f"pretraining runs failed: {', '.join(failed)}; the command starts them again "
                           "from their last block")


def part_pretrain_speed(args, results: dict) -> None:
    config, inputs, side = pretraining_inputs(args)
    init = initial_weights_file(config, side, inputs, args.seeds[0])
    data = keras_batches(load_rows(os.path.join(inputs, "train.npz")), config.train.batch_size)
    model = initial_pretrainer(config, side, args.seeds[0])
    ours = [time_steps(model, data, args.speed_steps) for _ in range(args.repeats)]
    peer = run_peer(args.peer_python, "pretrain_speed",
                    ["--inputs", inputs, "--init", init, "--steps", str(args.speed_steps),
                     "--repeats", str(args.repeats)], os.path.join(inputs, "peer-speed.json"))
    per_step = config.train.batch_size * config.model.max_sequence_length
    results["pretrain_speed"] = {
        **compared("tokens_per_second", [per_step / s for s in ours], [per_step / s for s in peer["step_seconds"]]),
        "jit_compile": config.train.jit_compile, "timed_steps": args.speed_steps, "repeats": args.repeats,
        "peer_versions": peer["versions"]}


def finetune_batches(args, config, batch_size: int, steps: int) -> tuple[list, str]:
    """`steps` SST-5 training batches of `batch_size` as kerasbert's fine-tuning makes them (shuffled,
    packed, each cut to its longest sentence), and the .npz the peer reads them from, written once."""
    preprocessor = TaskPreprocessor(load_tokenizer(minilm_checkpoint()), config.data.max_sequence_length)
    examples = load_examples("sst", os.path.join(args.data_dir, get_task("sst").train_file))
    batches = list(task_dataset("sst", examples, preprocessor, batch_size, training=True, seed=args.seeds[0])
                   .take(steps).as_numpy_iterator())
    path = os.path.join(args.output_dir, "inputs", f"sst-batches-{batch_size}.npz")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez(path, **{f"{name}_{i}": values for i, (x, y) in enumerate(batches)
                      for name, values in {**{k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")},
                                           "labels": y}.items()})
    return batches, path


def part_finetune_speed(args, results: dict) -> None:
    """Both sides' examples/s on the same batches at each batch size: `--repeats` rounds, each a
    timing of `--speed_steps` steps after 3 untimed ones on each side in turn (a fit call for
    kerasbert, a process for the peer)."""
    config, warmup = FinetuneConfig(), 3
    train, sizes = config.train, {}
    for batch_size in args.finetune_batch_sizes:
        keras.utils.set_random_seed(args.seeds[0])
        batches, path = finetune_batches(args, config, batch_size, warmup + args.speed_steps)
        model = MultitaskBert(load_encoder(minilm_checkpoint()), tasks=("sst",))
        model.compile(optimizer=make_optimizer(train), jit_compile=train.jit_compile)
        spec = tf.data.Dataset.from_tensor_slices(batches[0]).element_spec
        loose = tf.nest.map_structure(lambda s: tf.TensorSpec([None, *[None] * s.shape.rank], s.dtype), spec)
        data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=loose).repeat()
        ours, theirs = [], []
        for _ in range(args.repeats):  # in turn: the machine's drift hits both sides alike
            ours.append(batch_size / time_steps(model, data, args.speed_steps, warmup=warmup))
            peer = run_peer(args.peer_python, "finetune_speed",
                            ["--checkpoint", minilm_checkpoint(), "--batches", path, "--warmup", str(warmup),
                             "--repeats", "1", "--training", json.dumps(peer_training(train))],
                            path[:-len(".npz")] + "-peer.json")
            theirs += peer["examples_per_second"]
        sizes[f"batch_{batch_size}"] = {
            **compared("examples_per_second", ours, theirs),
            "mean_tokens": float(np.mean([x["token_ids"].shape[1] for x, _ in batches])),
            "peer_versions": peer["versions"]}
    results["finetune_speed"] = {**sizes, "task": "sst", "timed_steps": args.speed_steps, "repeats": args.repeats,
                                 "jit_compile": train.jit_compile, "machine_load": os.getloadavg()[0]}


def plot_pretrain(part: dict, path: str) -> None:
    """Held-out MLM and NSP accuracy of every run after every block: a colour a seed, a line an implementation."""
    seeds, lines = sorted({key.split("/")[1] for key in part["runs"]}), {"mlm_accuracy": [], "nsp_accuracy": []}
    for key, run in sorted(part["runs"].items()):
        implementation, seed = key.split("/")
        style = {"color": f"C{seeds.index(seed)}", "linestyle": IMPLEMENTATIONS[implementation][0]}
        for metric, found in lines.items():
            found.append((f"{implementation}, seed {seed}", [b["step"] for b in run["blocks"]],
                          [b[metric] for b in run["blocks"]], style))
    plot_panels(path, [{"title": f"held-out {metric[:3].upper()} accuracy", "lines": found,
                        "xlabel": "step (the same batches for every run)"} for metric, found in lines.items()],
                part["config"])


def pretrain_verdicts(part: dict) -> list[dict]:
    """Per seed and per other run of it (the peer, kerasbert without XLA), at the last step
    both reached: both accuracies, and at how many common blocks kerasbert's is at least the other's."""
    verdicts = []
    seeds = sorted({key.split("/")[1] for key in part["runs"]})
    for seed in seeds:
        ours = part["runs"].get(f"kerasbert/{seed}")
        for other in list(IMPLEMENTATIONS)[1:]:
            theirs = part["runs"].get(f"{other}/{seed}")
            if not (ours and theirs):
                continue
            by_step = {b["step"]: b for b in theirs["blocks"][1:]}
            pairs = [(a, by_step[a["step"]]) for a in ours["blocks"][1:] if a["step"] in by_step]
            for metric in ("mlm_accuracy", "nsp_accuracy") if pairs else ():
                last_a, last_b = pairs[-1][0][metric], pairs[-1][1][metric]
                verdicts.append({"seed": seed, "against": other, "step": pairs[-1][0]["step"], "metric": metric,
                                 "kerasbert": last_a, "other": last_b, "difference": last_a - last_b,
                                 "blocks_at_least": sum(a[metric] >= b[metric] for a, b in pairs),
                                 "blocks": len(pairs)})
    return verdicts


def save(args, results: dict) -> None:
    """This command's parts into results.json as it is on disk now (commands running other
    parts into the folder keep theirs); results.md and the curves redrawn."""
    on_disk = load_results(args.output_dir)
    results.update({**on_disk, **{part: results[part] for part in args.parts if part in results}})
    if "runs" in results.get("pretrain", {}):
        results["pretrain"]["verdicts"] = pretrain_verdicts(results["pretrain"])
    save_results(args.output_dir, results, "benchmarks.peers", TITLE)
    if results.get("pretrain", {}).get("runs"):
        plot_pretrain(results["pretrain"], os.path.join(args.output_dir, "pretrain_curves.png"))


PARTS = {"pretrain": part_pretrain, "pretrain_speed": part_pretrain_speed, "finetune_speed": part_finetune_speed}


def part_command(args, part: str) -> list[str]:
    """This command with `--parts part` (argparse keeps a flag's last value)."""
    return [sys.executable, "-m", "benchmarks.peers", *args.argv, "--parts", part]


def main(argv=None) -> int:
    parser = bench_parser("peers", __doc__, peer_python=True)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS),
                        help="Parts to run (default: all).")
    parser.add_argument("--config", default=CONFIG, help="Pretraining config of the pretrain parts.")
    parser.add_argument("--steps", type=int, default=0, help="Pretraining steps (0: the config's total_steps).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1234, 2], help="Initialisations to compare.")
    parser.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS)[:2], choices=list(IMPLEMENTATIONS),
                        help="The pretrain part's runs per seed (kerasbert-no-xla: a control for float rounding).")
    parser.add_argument("--speed_steps", type=int, default=20, help="Timed steps per repeat.")
    parser.add_argument("--repeats", type=int, default=3, help="Repeats of each timing.")
    parser.add_argument("--finetune_batch_sizes", type=int, nargs="+", default=[8, 32],
                        help="finetune_speed's batch sizes.")
    parser.add_argument("--jobs", type=int, default=2,
                        help="Pretraining runs trained side by side (0: train none, report the blocks so far).")
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)  # one run, started by the pretrain part
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if len(args.parts) > 1:
        # Each part in a process of its own: no part is timed after another in one process.
        for part in args.parts:
            subprocess.run(part_command(args, part), check=True)
        print(render_markdown(load_results(args.output_dir), TITLE))
        return 0
    results = load_results(args.output_dir)
    print(f"== benchmark part: {args.parts[0]}", flush=True)
    PARTS[args.parts[0]](args, results)
    if not args.run:
        save(args, results)
        print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
