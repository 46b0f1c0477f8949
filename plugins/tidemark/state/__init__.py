"""State: where records and files live, the sequential logs (commit log, hour journal), locks."""
