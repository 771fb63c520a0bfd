"""Where kerasbert's time goes, for choosing a speed lever: the export's serving graph step by
step, and the encoder over the real tokens only against the padded one.

    python -m benchmarks.profile [--output_dir runs/bench-profile] [--data_dir ../shared/data]

Parts (MiniLM, the first SST-5 dev sentences; medians of --repeats passes, A and B taken in
turn so that the machine's load falls on both alike):
    graph       `ServingGraph` of the export: tokenize, pack, encode, one by one and together,
                at batch 32 and batch 1.
    unpadded    sentence embedding (batch 32, trimmed to the longest row) and a multitask
                training step on SST-5 batches, with the unpadded encoder and with the padded one.
    optimizer   the same training step with keras' AdamW and with kerasbert's FusedAdamW.
    ops         under TensorFlow's profiler, op time by op type summed over threads (ops
                only, not the executor's frames around them): a training step, and the
                export's encoder at batch 32 and at batch 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def median_ms(call, inputs: list, repeats: int) -> float:
    """Median over `repeats` passes of the mean milliseconds per call over `inputs`."""
    call(inputs[0])  # traced outside the clock
    passes = []
    for _ in range(repeats):
        started = time.perf_counter()
        for item in inputs:
            call(item)
        passes.append(1000 * (time.perf_counter() - started) / len(inputs))
    return statistics.median(passes)


def minilm_parts(data_dir: str, sentences: int):
    import os

    from kerasbert.finetuning.data import TaskPreprocessor, load_examples
    from kerasbert.finetuning.model import MultitaskBert
    from kerasbert.models.encoder import load_encoder, minilm_checkpoint
    from kerasbert.tasks import BUILTIN_TASKS
    from kerasbert.tokenization import load_tokenizer

    checkpoint = minilm_checkpoint()
    preprocessor = TaskPreprocessor(load_tokenizer(checkpoint), 128)
    model = MultitaskBert(load_encoder(checkpoint), tasks=("sst",))
    texts = [e.text_a for e in load_examples("sst", os.path.join(data_dir, BUILTIN_TASKS["sst"].dev_file))[:sentences]]
    return model, preprocessor, texts


def text_batches(texts: list, size: int) -> list:
    """The sentences as string tensors of `size`; at batch 1, the first 64 only."""
    import tensorflow as tf

    return [tf.constant(texts[i:i + size]) for i in range(0, len(texts) if size > 1 else 64, size)]


def part_graph(model, preprocessor, texts: list, repeats: int) -> dict:
    import tensorflow as tf

    from kerasbert.export import ServingGraph

    graph = ServingGraph(model, preprocessor)
    embed = tf.function(graph.embed_text, input_signature=[tf.TensorSpec([None], tf.string)])
    rows = {}
    for size in (32, 1):
        batches = text_batches(texts, size)
        tokens = [graph.tokenize(b) for b in batches]
        packed = [graph.pack[1](t) for t in tokens]
        rows[f"batch {size}"] = {
            "tokenize_ms": median_ms(graph.tokenize, batches, repeats),
            "pack_ms": median_ms(lambda t: graph.pack[1](t), tokens, repeats),
            "encode_ms": median_ms(lambda p: graph.encode(*p), packed, repeats),
            "embed_text_ms": median_ms(embed, batches, repeats)}
    return rows


def part_unpadded(model, preprocessor, texts: list, data_dir: str, repeats: int) -> dict:
    import tensorflow as tf

    from benchmarks.pretrain import time_steps

    batches = [preprocessor("sst", tf.constant(texts[i:i + 32]), tf.constant([""] * 32))
               for i in range(0, len(texts) - 31, 32)]
    trimmed = []
    for x in batches:
        width = int(tf.reduce_max(tf.reduce_sum(tf.cast(x["padding_mask"], tf.int32), 1)))
        trimmed.append({k: v[:, :width] if v.shape.rank == 2 else v for k, v in x.items()})
    embed = {flag: tf.function(lambda x, flag=flag: model.embed(x, unpadded=flag), reduce_retracing=True)
             for flag in (True, False)}
    for flag in embed:  # trace every width once, outside the clock
        [embed[flag](x) for x in trimmed]
    embedding = {flag: [] for flag in embed}
    for _ in range(repeats):
        for flag in embed:
            embedding[flag].append(median_ms(embed[flag], trimmed, 1))

    trainings = {flag: sst_training(preprocessor, data_dir, unpadded=flag) for flag in (True, False)}
    step = {flag: [] for flag in trainings}
    for _ in range(repeats):
        for flag, (m, data) in trainings.items():
            step[flag].append(1000 * time_steps(m, data, 10))
    return {"embed_batch32_ms": {("unpadded" if f else "padded"): statistics.median(v) for f, v in embedding.items()},
            "train_step_ms": {("unpadded" if f else "padded"): statistics.median(v) for f, v in step.items()}}


def sst_training(preprocessor, data_dir: str, optimizer_class=None, unpadded: bool = True):
    """A MultitaskBert on MiniLM compiled as fine-tuning compiles it, and SST-5 training batches."""
    import os

    import keras

    from kerasbert.config import FinetuneConfig
    from kerasbert.finetuning.data import load_examples, task_dataset
    from kerasbert.finetuning.model import MultitaskBert
    from kerasbert.models.encoder import load_encoder, minilm_checkpoint
    from kerasbert.tasks import BUILTIN_TASKS
    from kerasbert.training.optim import make_optimizer

    keras.utils.set_random_seed(1)
    model = MultitaskBert(load_encoder(minilm_checkpoint()), tasks=("sst",), unpadded=unpadded)
    model.compile(optimizer=make_optimizer(FinetuneConfig().train, optimizer_class))
    examples = load_examples("sst", os.path.join(data_dir, BUILTIN_TASKS["sst"].train_file))
    return model, task_dataset("sst", examples, preprocessor, 32, training=True, seed=1)


def part_optimizer(preprocessor, data_dir: str, repeats: int) -> dict:
    import keras

    from benchmarks.pretrain import time_steps
    from kerasbert.training.optim import FusedAdamW

    trainings = {name: sst_training(preprocessor, data_dir, cls)
                 for name, cls in (("AdamW", keras.optimizers.AdamW), ("FusedAdamW", FusedAdamW))}
    step = {name: [] for name in trainings}
    for _ in range(repeats):
        for name, (model, data) in trainings.items():
            step[name].append(1000 * time_steps(model, data, 10))
    return {"train_step_ms": {name: statistics.median(v) for name, v in step.items()}}


def leaf_op_ms(space) -> dict:
    """Milliseconds by op type over the step's threads. Op events are named `name:Type` (not
    `Class::method`, the profiler's own marks); an op event with another inside it on its
    line is a frame (the executor's `Process` holds the ops it runs) and is left out, so each
    op's time counts once."""
    totals = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if line.name.startswith(("tf_data", "python")):
                continue  # the input pipeline runs beside the step; Python frames hold the step
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            ops = sorted((e for e in line.events if e.duration_ps and ":" in names[e.metadata_id].replace("::", "")),
                         key=lambda e: (e.offset_ps, -e.duration_ps))  # a frame before what it holds
            for event, after in zip(ops, ops[1:] + [None]):
                if after is not None and after.offset_ps < event.offset_ps + event.duration_ps:
                    continue  # a frame around the next op
                kind = names[event.metadata_id].split(":")[-1]
                totals[kind] = totals.get(kind, 0.0) + event.duration_ps / 1e9
    return totals


def profiled_op_ms(run, calls: int) -> dict:
    """Op milliseconds by op type per call of the `calls` that `run()` makes under
    TensorFlow's profiler, largest first."""
    import glob
    import tempfile

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        run()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    return {name: ms / calls for name, ms in sorted(leaf_op_ms(space).items(), key=lambda kv: -kv[1])}


def part_ops(model, preprocessor, texts: list, data_dir: str, steps: int = 4) -> dict:
    """Op time by type: a training step, and the export's encoder at batch 32 and at batch 1."""
    from kerasbert.export import ServingGraph

    training, data = sst_training(preprocessor, data_dir)
    training.fit(data, steps_per_epoch=3, epochs=1, verbose=0)  # traced outside the profile
    tables = {"training step": profiled_op_ms(lambda: training.fit(data, steps_per_epoch=steps, epochs=1, verbose=0),
                                              steps)}
    graph = ServingGraph(model, preprocessor)
    for size in (32, 1):
        packed = [graph.pack[1](graph.tokenize(b)) for b in text_batches(texts, size)]
        [graph.encode(*p) for p in packed]  # traced outside the profile
        tables[f"encoder, batch {size}"] = profiled_op_ms(lambda: [graph.encode(*p) for p in packed], len(packed))
    return {"steps": steps, "op_ms": tables}


def render(results: dict) -> str:
    lines = ["# Where kerasbert's time goes", "", f"Command: `{results['command']}`  ",
             f"Machine: {results['machine']}  ", f"Updated: {results['updated']}", ""]
    if "graph" in results:
        lines += ["## The export's serving graph (MiniLM; ms a call)", "",
                  "| batch | tokenize | pack | encode | embed_text (all three) |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {k} | {v['tokenize_ms']:.1f} | {v['pack_ms']:.1f} | {v['encode_ms']:.1f} | "
                  f"{v['embed_text_ms']:.1f} |" for k, v in results["graph"].items()]
        lines.append("")
    if "unpadded" in results:
        u = results["unpadded"]
        lines += ["## Encoder over the real tokens only against the padded one (MiniLM, ms)", "",
                  "| what | unpadded | padded | padded / unpadded |", "|---|---:|---:|---:|"]
        for key, title in (("embed_batch32_ms", "sentence embedding, batch 32"),
                           ("train_step_ms", "multitask training step, SST-5 batch 32")):
            lines.append(f"| {title} | {u[key]['unpadded']:.1f} | {u[key]['padded']:.1f} | "
                         f"{u[key]['padded'] / u[key]['unpadded']:.2f}x |")
        lines.append("")
    if "optimizer" in results:
        o = results["optimizer"]["train_step_ms"]
        lines += ["## keras' AdamW against FusedAdamW (multitask training step, SST-5 batch 32, MiniLM, ms)", "",
                  "| AdamW | FusedAdamW | AdamW / FusedAdamW |", "|---:|---:|---:|",
                  f"| {o['AdamW']:.1f} | {o['FusedAdamW']:.1f} | {o['AdamW'] / o['FusedAdamW']:.2f}x |", ""]
    if "op_ms" in results.get("ops", {}):  # (results of an older version have no "op_ms")
        for what, ops in results["ops"]["op_ms"].items():
            unit = "step" if what == "training step" else "call"
            total = sum(ops.values())
            lines += [f"## Op time by op type: {what} (summed over threads: {total:.1f} ms a {unit})", "",
                      f"| op | ms a {unit} | share |", "|---|---:|---:|"]
            lines += [f"| {name} | {ms:.2f} | {100 * ms / total:.1f}% |" for name, ms in list(ops.items())[:15]]
            lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks.results import load_results, save_results
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--output_dir", default="runs/bench-profile", help="Results folder.")
    parts = ["graph", "unpadded", "optimizer", "ops"]
    parser.add_argument("--parts", nargs="+", default=parts, choices=parts)
    parser.add_argument("--sentences", type=int, default=256, help="SST-5 dev sentences.")
    parser.add_argument("--repeats", type=int, default=3, help="Passes per measurement.")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir, default={})
    model, preprocessor, texts = minilm_parts(args.data_dir, args.sentences)
    if "graph" in args.parts:
        results["graph"] = part_graph(model, preprocessor, texts, args.repeats)
    if "unpadded" in args.parts:
        results["unpadded"] = part_unpadded(model, preprocessor, texts, args.data_dir, args.repeats)
    if "optimizer" in args.parts:
        results["optimizer"] = part_optimizer(preprocessor, args.data_dir, args.repeats)
    if "ops" in args.parts:
        results["ops"] = part_ops(model, preprocessor, texts, args.data_dir)
    save_results(args.output_dir, results, "benchmarks.profile", render)
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
