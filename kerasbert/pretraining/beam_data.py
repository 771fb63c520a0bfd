"""Pretraining examples (NSP pairs, unmasked) written as TFRecord shards by Apache Beam.

Each source of `data.sources` is read by one worker, its documents tokenized on any; each
multi-sentence document is cut into pairs by whichever worker holds it, with its own seeded
generator (`document_pairs`), so the examples per document are the same on every runner and
for any number of workers. Random next segments need the other documents of the source:
every worker holds the tokenized corpus (a side input), as google-research/bert holds it in
one process. Shards: `<output_dir>/examples-SSSSS-of-NNNNN.tfrecord`, read by
`pipelines.pretrain --set data.tfrecord_dir=...`; each example also names its document.

Example (`pretrain_config`: a 40-document corpus of the 15-token `vocabulary`):
    >>> write_pretraining_shards(pretrain_config, vocabulary, "", f"{tmp_path}/shards", 2, ["--runner=DirectRunner"])
    {'pairs': 147, 'mlm_only': 0}
    >>> sorted(os.listdir(f"{tmp_path}/shards"))  # for pipelines.pretrain --set data.tfrecord_dir=...
    ['examples-00000-of-00002.tfrecord', 'examples-00001-of-00002.tfrecord']
"""

from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from kerasbert.beam_runs import pipeline_options, run_pipeline
from kerasbert.config import PretrainConfig
from kerasbert.errors import ConfigError
from kerasbert.pretraining.document_pairs import kept_sentences, pairs_of_document, pools_of, single_examples

NAMESPACE = "kerasbert_pretraining_data"


def read_source(indexed_source, data_dir: str):
    from kerasbert.data.corpus import load_corpus

    place, name = indexed_source
    for index, document in enumerate(load_corpus(name, data_dir)):
        yield (place, index), document


class Tokenize(beam.DoFn):
    def __init__(self, vocabulary: list[str]):
        self.vocabulary = [str(token) for token in vocabulary]  # a plain list (keras tracks its own)

    def setup(self):
        from kerasbert.cpu_kernels import prefer_onednn

        prefer_onednn()
        from kerasbert import tokenization

        self.tokenizer = tokenization.make_tokenizer(self.vocabulary)

    def process(self, keyed_document):
        from kerasbert.pretraining.inputs import tokenize_documents

        key, document = keyed_document
        sentences = kept_sentences(tokenize_documents(self.tokenizer, [document])[0])
        if sentences:
            yield key, sentences


class CutPairs(beam.DoFn):
    """A multi-sentence document -> its examples; the corpus and its pools come as side inputs."""

    def __init__(self, config: PretrainConfig):
        self.seed, self.data = config.train.seed, config.data
        self.max_sequence_length = config.model.max_sequence_length
        self._pools_of = None

    def process(self, keyed_document, documents: dict, sources: dict):
        if self._pools_of is not documents:  # once per worker and side input
            self._pools, self._pools_of = pools_of(documents, sources), documents
        key, document = keyed_document
        if len(document) < 2:
            return
        for example in pairs_of_document(documents, key, self._pools, self.seed, self.max_sequence_length,
                                         self.data.short_seq_prob, self.data.dupe_factor):
            yield example


def serialized(example: dict) -> bytes:
    """The tf.Example of `write_tfrecords`, plus the bytes feature `document` ("source:index")."""
    import tensorflow as tf

    Metrics.counter(NAMESPACE, "pairs" if example["nsp_weight"] else "mlm_only").inc()
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    feature = {"segment_a": ints(example["segment_a"]), "segment_b": ints(example["segment_b"]),
               "nsp_label": ints([example["nsp_label"]]),
               "nsp_weight": tf.train.Feature(float_list=tf.train.FloatList(value=[example["nsp_weight"]])),
               "document": tf.train.Feature(bytes_list=tf.train.BytesList(value=[example["document"].encode()]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def build_pipeline(pipeline, config: PretrainConfig, vocabulary: list[str], data_dir: str, output_dir: str,
                   num_shards: int) -> None:
    if not config.data.nsp:
        raise ConfigError("pipelines.make_pretraining_data writes NSP pairs: data.nsp must be true")
    sources = list(enumerate(config.data.sources))
    documents = (pipeline
                 | "Sources" >> beam.Create(sources)
                 | "Read" >> beam.FlatMap(read_source, data_dir)
                 | "Reshuffle" >> beam.Reshuffle()  # spread a big source's documents over the workers
                 | "Tokenize" >> beam.ParDo(Tokenize(vocabulary)))
    source_names = dict(sources)
    corpus = beam.pvalue.AsDict(documents)
    source_of = beam.pvalue.AsDict(documents | "Source" >> beam.Map(lambda kv: (kv[0], source_names[kv[0][0]])))
    pairs = documents | "Pairs" >> beam.ParDo(CutPairs(config), corpus, source_of)
    singles = (documents
               | "Singles" >> beam.Filter(lambda kv: len(kv[1]) == 1)
               | "AllSingles" >> beam.combiners.ToDict()
               | "Pack" >> beam.FlatMap(single_examples, config.model.max_sequence_length))
    ((pairs, singles)
     | "Examples" >> beam.Flatten()
     | "Serialize" >> beam.Map(serialized)
     | "Write" >> beam.io.WriteToTFRecord(os.path.join(output_dir, "examples"), file_name_suffix=".tfrecord",
                                          num_shards=num_shards))


def write_pretraining_shards(config: PretrainConfig, vocabulary: list[str], data_dir: str, output_dir: str,
                             num_shards: int, beam_args: list[str] | None = None,
                             verbose: bool = False) -> dict[str, int]:
    """Runs the pipeline; returns the numbers of examples written: NSP pairs and MLM-only."""
    pipeline = beam.Pipeline(options=pipeline_options(beam_args, verbose))
    build_pipeline(pipeline, config, vocabulary, data_dir, output_dir, num_shards)
    result = run_pipeline(pipeline, verbose)
    counts = {"pairs": 0, "mlm_only": 0}
    for counter in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        counts[counter.key.metric.name] += counter.committed
    return counts
