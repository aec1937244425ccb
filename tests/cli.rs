//! The `wharf` command line against a spawned broker.
