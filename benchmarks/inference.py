"""Raw text to predictions on the SST-5 dev sentences (and CoNLL-2003 dev entities:
benchmarks/inference_entities.py), side by side in one run: kerasbert's export in
process (fp32, int8 and, where the CPU has AVX512-BF16 or AMX, bf16) and served by `python -m
serving` over REST and gRPC (fp32, int8); transformers' pipeline (PyTorch); ONNX Runtime fp32 (its BERT optimizer) and int8 (dynamic
quantization), each with the HF fast tokenizer (benchmarks/peer_onnx.py, in .venv-peer). The same
weights everywhere, a task's: one MiniLM classifier (and tagger) fine-tuned by kerasbert, exported as a
SavedModel and as a transformers folder, which the peer converts to ONNX. docs/benchmarks.md tells what
the figures mean.

    make bench-inference
    python -m benchmarks.inference --tasks sst ner --repeats 3 --batch_1_texts 64   # the same, its defaults

What runs once and is kept in --output_dir (a second run skips it): the fine-tuning (--train_steps at
batch 32, heads.pooling=cls as transformers' classifier reads), the exports, the ONNX files. Each
repetition asks every system in turn (the order rotated each time) for a pass at batch 1 over the
first --batch_1_texts sentences and one at batch 32 over all 1,101; every system stays loaded in
its own process or server between passes, so the machine's drift hits all alike. A system's figures
are the medians over the repetitions: sentences/s (texts over the pass's seconds), p50 and p99 of a
call's milliseconds; `spread` is its slowest repetition's sentences/s over its fastest (the noise).
Accuracy: its class against the dev label, over all 1,101 sentences. The tasks run one after the
other, each its systems' rounds; results.json: the classifier's `systems`, the tagger's under `entities`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from typing import Callable

import numpy as np

from benchmarks.peer_protocol import read_json, timed_pass, write_json
from benchmarks.results import ROOT, bench_parser, check_peer_python, load_results, save_results, timestamp
from serving.process import stop_on_sigterm

PEERS = ("transformers", "ort_fp32", "ort_int8")


@dataclasses.dataclass(frozen=True)
class Job:
    """One fine-tuned model the bench measures: its task, how it is trained, what its signature answers.

    `answers`: the signature's outputs ({name: an array or list a text}, in process or served) -> an
    answer a text (JSON values, as the peer's workers answer); `dev`: (run folder, data folder) ->
    (the dev texts, answers -> their scores)."""
    task: str  # the run's task, its transformers folder's name
    kind: str  # benchmarks/peer_onnx.py's --task
    folder: str  # under --output_dir
    train: tuple[str, ...]  # pipelines.finetune's flags, but its steps
    steps: int
    signature: str
    answers: Callable[[dict], list]
    dev: Callable[[str, str], tuple]


SERVED = ("fp32", "int8")  # the precisions also timed over REST and gRPC


def precisions() -> list[str]:
    """kerasbert's exports (pipelines.export --precision) this CPU runs: bf16 products need
    AVX512-BF16 or AMX (elsewhere they are emulated, slower than fp32)."""
    with open("/proc/cpuinfo") as f:
        flags = set(f.read().split("\n\n")[0].split())
    return ["fp32", "int8"] + (["bf16"] if flags & {"avx512_bf16", "amx_bf16"} else [])


def run(command: list[str]) -> None:
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def prepare(args, job: Job) -> dict[str, str]:
    """The fine-tuned run, its exports and the ONNX files, each made unless there: {what: path}."""
    out = os.path.join(args.output_dir, job.folder)
    paths = {"out": out, **{what: os.path.join(out, what) for what in ("hf", "onnx")},
             "run": os.path.join(out, "finetune")}
    if not os.path.exists(os.path.join(paths["run"], "metrics.json")):
        run([sys.executable, "-m", "pipelines.finetune", *job.train, "--set", f"train.total_steps={job.steps}",
             "--set", f"train.steps_per_block={job.steps}", "--data_dir", args.data_dir,
             "--output_dir", paths["run"]])
    for precision in precisions():
        paths[precision] = os.path.join(out, "export", precision)
        if not os.path.exists(os.path.join(paths[precision], "1")):
            run([sys.executable, "-m", "pipelines.export", "--model_dir", paths["run"], "--export_base",
                 paths[precision], "--version", "1", "--precision", precision])
    if not os.path.exists(os.path.join(paths["hf"], job.task)):
        run([sys.executable, "-m", "pipelines.export", "--model_dir", paths["run"], "--format", "transformers",
             "--export_base", paths["hf"]])
    paths["hf"] = os.path.join(paths["hf"], job.task)
    if not os.path.exists(os.path.join(paths["onnx"], "versions.json")):
        run([args.peer_python, "-m", "benchmarks.peer_onnx", "convert", "--model_dir", paths["hf"],
             "--output_dir", paths["onnx"], "--task", job.kind])
    return paths


def dev_sentences(run_dir: str, data_dir: str) -> tuple[list[str], Callable[[list], dict]]:
    """The SST-5 dev sentences as the run's task reads them, and the accuracy of classes for them."""
    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.data.task_files import read_task_file

    spec = load_config(FinetuneConfig, os.path.join(run_dir, "config.json"), []).tasks["sst"]
    examples = read_task_file(spec, os.path.join(data_dir, spec.dev_file)).examples
    labels = np.array([int(e.label) for e in examples])
    return [e.text_a for e in examples], lambda answers: {"accuracy": float(np.mean(np.array(answers) == labels))}


CLASSES = Job("sst", "classes", "", ("--config", "finetune_minilm_cross", "--set", "tasks=sst", "--set",
                                     "data.max_sequence_length=128", "--set", "train.learning_rate=1e-4",
                                     "--set", "heads.pooling=cls"),
              400, "sentiment", lambda outputs: [int(label) for label in np.asarray(outputs["label"])], dev_sentences)


class InProcess:
    """A system in this process: `call` (texts -> classes) timed here."""

    def __init__(self, call):
        self.call = call

    def timed(self, texts: list[str], batch_size: int, count: int):
        return timed_pass(self.call, texts[:count], batch_size)

    def close(self):
        pass


class Worker:
    """A peer system in its own process (benchmarks/peer_onnx.py worker), timed there."""

    def __init__(self, command: list[str], log_path: str):
        self.log = open(log_path, "a")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"{' '.join(command)} exited before it was ready: see {log_path}")
        self.versions = json.loads(ready)["versions"]

    def timed(self, texts: list[str], batch_size: int, count: int):
        self.process.stdin.write(json.dumps({"batch_size": batch_size, "count": count}) + "\n")
        self.process.stdin.flush()
        found = json.loads(self.process.stdout.readline())
        return found["seconds"], found["answers"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(60)
        self.log.close()


def kerasbert_systems(job: Job, paths: dict, servers: list) -> dict:
    """kerasbert_<precision> in process, and for the SERVED precisions _rest and _grpc from
    `python -m serving` (started into `servers`, which the caller stops)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    from serving.client import ServingClient
    from serving.process import LocalServer

    systems = {}
    for precision in precisions():
        signature = tf.saved_model.load(os.path.join(paths[precision], "1")).signatures[job.signature]
        systems[f"kerasbert_{precision}"] = InProcess(lambda texts, signature=signature: job.answers(
            {name: value.numpy() for name, value in signature(text=tf.constant(texts)).items()}))
        if precision not in SERVED:
            continue
        name = f"{job.task}-{precision}"
        server = LocalServer(name, paths[precision], log_path=os.path.join(paths["out"], f"server-{precision}.log"))
        servers.append(server.start())
        server.wait_for_version(1)
        for protocol in ("rest", "grpc"):
            client = ServingClient(name, rest_port=server.rest_port, grpc_port=server.grpc_port, protocol=protocol,
                                   timeout=120)
            systems[f"kerasbert_{precision}_{protocol}"] = InProcess(
                lambda texts, client=client: job.answers(client.predict(job.signature, {"text": texts})))
    return systems


def summary(passes: list[tuple[list[float], list[int]]]) -> dict:
    """Medians over the repetitions' passes of sentences/s and a call's p50 and p99 ms; the spread."""
    rates = [len(labels) / sum(seconds) for seconds, labels in passes]
    return {"sentences_per_s": statistics.median(rates),
            "p50_ms": statistics.median(float(np.percentile(s, 50)) * 1e3 for s, _ in passes),
            "p99_ms": statistics.median(float(np.percentile(s, 99)) * 1e3 for s, _ in passes),
            "spread": min(rates) / max(rates), "repeats": rates}


def measure(args, systems: dict, texts: list[str], score: Callable[[list], dict]) -> dict:
    """Every system's passes, interleaved (`--repeats` rounds, the order rotated each round); the
    `score` of its answers in its first batch-32 pass (over all `texts`)."""
    names, passes = list(systems), {name: {1: [], 32: []} for name in systems}
    counts = {1: args.batch_1_texts, 32: len(texts)}
    for round_ in range(args.repeats):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            for batch_size in (1, 32):
                passes[name][batch_size].append(systems[name].timed(texts, batch_size, counts[batch_size]))
            print(f"round {round_ + 1}/{args.repeats} {name}: "
                  f"{counts[32] / sum(passes[name][32][-1][0]):.1f} sentences/s at batch 32", flush=True)
    return {name: {"batch_1": summary(found[1]), "batch_32": summary(found[32]), **score(found[32][0][1])}
            for name, found in passes.items()}


def measure_job(args, job: Job) -> dict:
    """One job's systems, each loaded, measured (`measure`) and stopped; the results of its part."""
    paths = prepare(args, job)
    texts, score = job.dev(paths["run"], args.data_dir)
    texts_path = os.path.join(paths["out"], "texts.json")
    write_json(texts_path, texts)
    servers, workers = [], {}
    try:
        for system in PEERS:
            workers[system] = Worker([args.peer_python, "-m", "benchmarks.peer_onnx", "worker", "--system", system,
                                      "--model_dir", paths["hf"], "--onnx_dir", paths["onnx"], "--texts", texts_path,
                                      "--task", job.kind], os.path.join(paths["out"], f"worker-{system}.log"))
        systems = {**kerasbert_systems(job, paths, servers), **workers}
        load = os.getloadavg()
        found = measure(args, systems, texts, score)
        load = {"before": load[0], "after": os.getloadavg()[0]}
    finally:
        for system in workers.values():
            system.close()
        for server in servers:
            server.stop()
    import tensorflow as tf
    return {"systems": found, "load_average_1min": load, "dev_sentences": len(texts),
            "training": {key: value for key, value in read_json(os.path.join(paths["run"], "metrics.json")).items()
                         if key.startswith(job.task) or key == "best_step"},
            "train_steps": job.steps, "versions": {"tensorflow": tf.__version__, **workers["ort_fp32"].versions},
            "onnx_fusions": read_json(os.path.join(paths["onnx"], "versions.json"))["fusions"], "finished": timestamp()}


def main(argv=None) -> int:
    from benchmarks.inference_entities import ENTITIES

    parser = bench_parser("inference", __doc__, peer_python=True)
    parser.add_argument("--tasks", nargs="+", default=["sst", "ner"], choices=["sst", "ner"],
                        help="sst: SST-5 classes (results.json's systems); ner: CoNLL-2003 entities (its entities).")
    parser.add_argument("--repeats", type=int, default=3, help="Rounds of passes of every system.")
    parser.add_argument("--batch_1_texts", type=int, default=64, help="Sentences of each batch-1 pass.")
    parser.add_argument("--train_steps", type=int, default=CLASSES.steps, help="sst: fine-tuning steps at batch 32 (once).")
    parser.add_argument("--ner_train_steps", type=int, default=ENTITIES.steps,
                        help="ner: fine-tuning steps at batch 32 (once).")
    args = parser.parse_args(argv)
    check_peer_python(args.peer_python)
    stop_on_sigterm()  # the servers and workers are stopped however the run ends
    os.makedirs(args.output_dir, exist_ok=True)
    found = {"uptime_before": uptime(), "settings": {"repeats": args.repeats, "batch_1_texts": args.batch_1_texts}}
    for task in args.tasks:  # each task's figures saved as soon as they are measured
        if task == "sst":
            found.update(measure_job(args, dataclasses.replace(CLASSES, steps=args.train_steps)))
        else:
            found["entities"] = measure_job(args, dataclasses.replace(ENTITIES, steps=args.ner_train_steps))
        found["uptime_after"] = uptime()
        # Into the file as it is now: a task measured by another command keeps its figures.
        markdown = save_results(args.output_dir, {**load_results(args.output_dir), **found}, "benchmarks.inference",
                                "Raw text to predictions: kerasbert against transformers and ONNX Runtime")
    print(markdown)
    return 0


def uptime() -> str:
    """`uptime`'s line: the machine's load over 1, 5 and 15 minutes (others' work shares the cores)."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
