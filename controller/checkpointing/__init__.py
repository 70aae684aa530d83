"""The controller's own checkpoint: its progress table, written atomically
every ``SP_CONTROLLER_CHECKPOINT_FREQ`` ms and reloaded on restart."""
