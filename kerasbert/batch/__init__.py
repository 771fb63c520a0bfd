"""Batch inference on Apache Beam: an exported SavedModel's signature over many files.

`input_rows.py` turns input files (text, task TSVs, TFRecords of tf.Example) into keyed rows or
refused rows; `handler.py` is the RunInference model handler for a SavedModel signature;
`records.py` writes results as JSON lines or tf.Examples; `pipeline.py` wires them into
one Beam pipeline (`pipelines.batch_predict`). Beam's own `--runner` options choose where
it runs: the direct runner here, Dataflow, Flink or Spark unchanged.
"""
