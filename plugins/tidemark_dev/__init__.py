"""Developer tooling: local services, the demo, data generators. Not shipped to executors."""
