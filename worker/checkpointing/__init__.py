"""Asynchronous worker checkpoints: consistent cuts of Spark's working
checkpoint directory, copied incrementally to a durable, content-addressed
store, committed to the controller, retained and garbage-collected."""
