"""Sparkpoint controller: pipeline-wide progress, checkpoints, savepoints."""
