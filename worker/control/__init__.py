"""The worker's side of the worker<->controller contract."""
