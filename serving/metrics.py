"""TF Serving's metrics, under the names its Prometheus exporter writes them
(util/prometheus_exporter.cc: "/tensorflow/serving/request_count" is exported as
":tensorflow:serving:request_count"), with its labels and its histogram buckets.

Why prometheus_client: Prometheus's own Python client, whose registry, histograms and
text exposition are what Prometheus scrapes. Counters are exposed under their exact name
(TYPE untyped): its text format would rename a counter to `<name>_total`, and the
dashboards written for TF Serving query the names it exports.

    request_count            {model_name, status}          every request, by gRPC status
    request_latency          {model_name, API, entrypoint} successful requests, microseconds
    runtime_latency          {model_name, API, runtime}    the model call, microseconds
    request_example_counts   {model}                       examples per classify/regress
    request_example_count_total {model}
    model_warmup_latency     {model_path, status}
    batching_session/queuing_latency {thread_pool_name}, input_batch_size, processed_batch_size,
    padding_size {execution_batch_size}, wrapped_run_count
    :tensorflow:cc:saved_model:load_attempt_count {model_path, status}, load_latency {model_path}

A model label is a name the server has loaded; a request naming any other model (one that
does not exist, or a 16 MB name) is counted under the one label `(unknown)`, so clients
cannot create series: what they cost is bounded by the server's own model config. The series
of a model that leaves the config, and of a version path no model holds any more (unloaded, or
its failed load forgotten), are released (`keep_only`): a config of 10,000 models, or of one
model with 10,000 versions, costs series while it is in force, not for the server's life.

Example:
    >>> metrics = ServingMetrics()
    >>> metrics.load("/models/kerasbert/1", ok=True, seconds=1.5, model="kerasbert")
    >>> metrics.request("kerasbert", "predict", "REST", "OK", seconds=0.012)
    >>> b':tensorflow:serving:request_count{model_name="kerasbert",status="OK"} 1.0' in metrics.exposition()
    True
"""

from __future__ import annotations

import threading

import prometheus_client
from prometheus_client.core import Metric

prometheus_client.disable_created_metrics()  # TF Serving exports no *_created series
DEFAULT_PATH = "/monitoring/prometheus/metrics"  # PrometheusExporter::kPrometheusPath
UNKNOWN_MODEL = "(unknown)"  # the model label of every request naming a model never loaded


def exponential(scale: float, growth: float, count: int) -> list[float]:
    """monitoring::Buckets::Exponential: scale * growth^i for i < count, then +Inf."""
    return [scale * growth ** i for i in range(count)] + [float("inf")]


def prometheus_name(tf_name: str) -> str:
    """GetPrometheusMetricName: every character outside [a-zA-Z0-9_] becomes ':'."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else ":" for c in tf_name)


class _Counter:
    """A cumulative count by label values, collected under its exact name."""

    def __init__(self, tf_name: str, documentation: str, labels: tuple[str, ...]):
        self.name, self.documentation, self.labels = prometheus_name(tf_name), documentation, labels
        self._values: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def label_values(self) -> list[tuple]:
        with self._lock:
            return list(self._values)

    def remove(self, *label_values: str) -> None:
        with self._lock:
            self._values.pop(label_values, None)

    def inc(self, *label_values: str, amount: float = 1) -> None:
        with self._lock:
            self._values[label_values] = self._values.get(label_values, 0) + amount

    def value(self, *label_values: str) -> float:
        with self._lock:
            return self._values.get(label_values, 0)

    def first_value(self) -> float:
        """The value of the first label values counted (0 before any)."""
        with self._lock:
            return next(iter(self._values.values()), 0)

    def collect(self):
        metric = Metric(self.name, self.documentation, "unknown")
        with self._lock:
            for label_values, value in self._values.items():
                metric.add_sample(self.name, dict(zip(self.labels, label_values)), value)
        yield metric


def labelled_series(metric, labels: tuple[str, ...]) -> list[tuple]:
    """The values of `labels` (the metric's) of each series of a _Counter or a prometheus_client metric."""
    if isinstance(metric, _Counter):
        return metric.label_values()
    return list(dict.fromkeys(tuple(sample.labels[name] for name in labels)
                              for family in metric.collect() for sample in family.samples))


class ServingMetrics:
    """One server's metrics, each recorded where TF Serving records it; with `enabled` False
    (no --monitoring_config_file exports them) nothing is recorded."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._loaded_models: set[str] = set()  # the only names that become labels
        self.registry = prometheus_client.CollectorRegistry(auto_describe=False)
        self._labelled: list[tuple] = []  # (metric, its labels) of every metric labelled by model or path

        def counter(tf_name, documentation, *labels):
            metric = _Counter(tf_name, documentation, labels)
            self.registry.register(metric)
            self._labelled.append((metric, labels))
            return metric

        def histogram(tf_name, documentation, labels, buckets):
            metric = prometheus_client.Histogram(prometheus_name(tf_name), documentation, labels, buckets=buckets,
                                                 registry=self.registry)
            self._labelled.append((metric, labels))
            return metric

        micros = exponential(10, 1.8, 33)
        sizes = exponential(1, 2, 14)
        self.request_count = counter("/tensorflow/serving/request_count", "The total number of requests.",
                                     "model_name", "status")
        self.request_latency = histogram(
            "/tensorflow/serving/request_latency",
            "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
            ("model_name", "API", "entrypoint"), micros)
        self.runtime_latency = histogram(
            "/tensorflow/serving/runtime_latency", "Distribution of wall time (in microseconds) for Tensorflow runtime.",
            ("model_name", "API", "runtime"), micros)
        self.example_counts = histogram("/tensorflow/serving/request_example_counts",
                                        "The number of tensorflow.Examples per request.", ("model",),
                                        exponential(1, 2, 15))
        self.example_count_total = counter("/tensorflow/serving/request_example_count_total",
                                           "The total number of tensorflow.Examples.", "model")
        self.warmup_latency = histogram("/tensorflow/serving/model_warmup_latency",
                                        "Distribution of wall time (in microseconds) for warming up the model.",
                                        ("model_path", "status"), micros)
        self.load_attempt_count = counter("/tensorflow/cc/saved_model/load_attempt_count",
                                          "The number of times a SavedModel was successfully loaded.",
                                          "model_path", "status")
        self.load_latency = counter("/tensorflow/cc/saved_model/load_latency",
                                    "Latency in microseconds for SavedModels that were successfully loaded.",
                                    "model_path")
        self.queuing_latency = histogram("/tensorflow/serving/batching_session/queuing_latency",
                                         "Distribution of wall time spent (in microseconds) in queuing",
                                         ("thread_pool_name",), exponential(100, 1.2, 52))
        self.input_batch_size = histogram("/tensorflow/serving/batching_session/input_batch_size",
                                          "Tracks the batch size distribution on the inputs.", (), sizes)
        self.processed_batch_size = histogram("/tensorflow/serving/batching_session/processed_batch_size",
                                              "Tracks the batch size distribution on processing.", (), sizes)
        self.padding_size = histogram("/tensorflow/serving/batching_session/padding_size",
                                      "Tracks the padding size distribution on batches.", ("execution_batch_size",),
                                      sizes)
        self.wrapped_run_count = counter("/tensorflow/serving/batching_session/wrapped_run_count",
                                         "Total count of run calls on the wrapped session")

    def int64_value(self, tf_name: str) -> int:
        """A counter's first point, as TF Serving's ModelService reads a metric a
        ReloadConfigRequest names (CollectMetrics: the first point's int64 value); 0 for any
        other name (and for every name while recording is off).

        >>> metrics = ServingMetrics()
        >>> metrics.load("/m/1", ok=True, seconds=1.0, model="m")
        >>> metrics.int64_value("/tensorflow/cc/saved_model/load_attempt_count"), metrics.int64_value("/x")
        (1, 0)
        """
        for counter in vars(self).values():
            if isinstance(counter, _Counter) and counter.name == prometheus_name(tf_name):
                return int(counter.first_value())
        return 0

    # --- Where TF Serving records -------------------------------------------------------------

    def model_label(self, model: str) -> str:
        """`model` if the server has loaded it, else UNKNOWN_MODEL: a client's name never
        becomes a series of its own.

        >>> metrics = ServingMetrics()
        >>> metrics.load("/m/1", ok=True, seconds=1.0, model="m")
        >>> metrics.model_label("m"), metrics.model_label("x" * 100)
        ('m', '(unknown)')
        """
        return model if model in self._loaded_models else UNKNOWN_MODEL

    def request(self, model: str, api: str, entrypoint: str, status: str, seconds: float) -> None:
        """A finished request (RecordModelRequestCount; RecordRequestLatency when it succeeded)."""
        if not self.enabled:
            return
        model = self.model_label(model)
        self.request_count.inc(model, status)
        if status == "OK":
            self.request_latency.labels(model, api, entrypoint).observe(seconds * 1e6)

    def runtime(self, model: str, api: str, seconds: float) -> None:
        if not self.enabled:
            return
        self.runtime_latency.labels(self.model_label(model), api, "TF1").observe(seconds * 1e6)

    def examples(self, model: str, count: int) -> None:
        if not self.enabled:
            return
        model = self.model_label(model)
        self.example_counts.labels(model).observe(count)
        self.example_count_total.inc(model, amount=count)

    def load(self, path: str, ok: bool, seconds: float, model: str = "") -> None:
        """A load attempt of the version at `path`; a successful one makes `model` a label."""
        if ok and model:
            self._loaded_models.add(model)  # names from the server's own config: a bounded set
        if not self.enabled:
            return
        self.load_attempt_count.inc(path, "success" if ok else "fail")
        if ok:
            self.load_latency.inc(path, amount=round(seconds * 1e6))

    def warmup(self, path: str, ok: bool, seconds: float) -> None:
        if not self.enabled:
            return
        self.warmup_latency.labels(path, "OK" if ok else "FAILED").observe(seconds * 1e6)

    def batch(self, queued_seconds: list[float], task_rows: list[int], rows: int, padded_rows: int,
              thread_pool_name: str = "batch_threads") -> None:
        """One batch run by the batching session: each task's wait, its size, the batch's."""
        if not self.enabled:
            return
        for seconds, size in zip(queued_seconds, task_rows):
            self.queuing_latency.labels(thread_pool_name).observe(seconds * 1e6)
            self.input_batch_size.observe(size)
        self.processed_batch_size.observe(padded_rows)
        self.padding_size.labels(str(padded_rows)).observe(padded_rows - rows)
        self.wrapped_run_count.inc()

    def watch_budgets(self, budgets) -> None:
        """Exports the request-memory budgets (serving/memory_budget.py), this server's own
        metric: `:kerasbert:serving:memory_budget_bytes{budget, kind}`, kind being used,
        peak (since start) or capacity."""
        class Budgets:
            def collect(self):
                metric = Metric(":kerasbert:serving:memory_budget_bytes",
                                "Bytes of request data held, at most held, and allowed, by budget.", "gauge")
                for name, budget in (("decoding", budgets.decoding), ("large_bodies", budgets.large_bodies),
                                     ("small_bodies", budgets.small_bodies)):
                    for measure in ("used", "peak", "capacity"):
                        metric.add_sample(metric.name, {"budget": name, "kind": measure}, getattr(budget, measure))
                yield metric

        if self.enabled:
            self.registry.register(Budgets())

    def keep_only(self, models: set[str], paths: set[str]) -> None:
        """Releases the series of every model label not in `models` (UNKNOWN_MODEL stays) and of
        every model_path label not in `paths`: what the manager still holds.

        >>> metrics = ServingMetrics()
        >>> metrics.load("/m/1", ok=True, seconds=1.0, model="m")
        >>> metrics.request("m", "predict", "REST", "OK", seconds=0.1)
        >>> metrics.keep_only(models=set(), paths=set())
        >>> metrics.model_label("m"), b'"m"' in metrics.exposition(), b'/m/1' in metrics.exposition()
        ('(unknown)', False, False)
        """
        self._loaded_models &= models
        kept = {"model_name": models | {UNKNOWN_MODEL}, "model": models | {UNKNOWN_MODEL}, "model_path": paths}
        for metric, labels in self._labelled:
            position = next((i for i, name in enumerate(labels) if name in kept), None)
            if position is None:
                continue
            for values in labelled_series(metric, labels):
                if values[position] not in kept[labels[position]]:
                    metric.remove(*values)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return prometheus_client.generate_latest(self.registry)
