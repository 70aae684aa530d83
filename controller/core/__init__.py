"""The controller's transport-agnostic core: gRPC and REST adapt to it."""
