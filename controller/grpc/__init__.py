"""gRPC adapter: workers talk to the controller core through it."""
