"""Task families beyond sentence classification: token tagging (`tagging`, NER on CoNLL-2003)
and extractive question answering (`span_qa`, SQuAD v1.1).

A family is code, a task is data: each family module takes plain values (tag names,
sequence length, doc stride, ...) and offers what a task system calls, listed at the top of
the module: reader, features, model, loss, metrics, and in-graph decoding for export.
"""
