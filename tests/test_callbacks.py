"""Training callbacks: what the throughput figure in metrics.json counts."""

import time

from kerasbert.training.callbacks import Throughput


def run_block(throughput: Throughput, steps: int, step_seconds: float, after_block_seconds: float) -> None:
    for batch in range(steps):
        throughput.on_train_batch_begin(batch)
        time.sleep(step_seconds)
        throughput.on_train_batch_end(batch)
    time.sleep(after_block_seconds)  # what a callback earlier in the list does: dev scoring, backup
    throughput.on_epoch_end(0)


def test_throughput_counts_training_steps_only():
    throughput = Throughput(batch_size=8)
    run_block(throughput, steps=5, step_seconds=0.02, after_block_seconds=0.5)
    run_block(throughput, steps=5, step_seconds=0.02, after_block_seconds=0.5)
    # Steps 1-4 of each block are timed (step 0 includes compiling): 4 * 8 / ~0.08 s = ~400/s.
    # Counting the 0.5 s after the block would give ~55/s.
    assert len(throughput.block_rates) == 2
    assert 250 < throughput.examples_per_second() <= 8 / 0.02
