"""Savepoints: user-triggered, retained pointers to a complete checkpoint of
every worker (Flink's savepoints). Pure bookkeeping: the records and their
validation (``model``), taking, listing and disposing them (``registry``),
restores (``restores``) and exports (``exports``); file I/O in ``store`` and
``exported``; ``service`` composes them. User-given paths are confined to the
savepoint root by ``sparkpoint.paths``."""
