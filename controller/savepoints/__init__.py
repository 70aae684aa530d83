"""Savepoints: user-triggered, retained pointers to a complete checkpoint of
every worker (DESIGN.md §6, seed flink-savepoints). Pure bookkeeping here:
the records and their validation (``model``), taking, listing and disposing
them (``registry``), and user-given paths under the savepoint root
(``paths``). Transport and file I/O live with the controller service."""
