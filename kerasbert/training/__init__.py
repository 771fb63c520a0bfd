"""The training run skeleton and the callbacks, optimizer and checks pretraining and fine-tuning share."""
