"""Pieces shared by Sparkpoint's services: environment parsing, the event log
format, the producer and the local development stack."""
