"""Model identity: known files, the search path and cache, built-in replicas."""
