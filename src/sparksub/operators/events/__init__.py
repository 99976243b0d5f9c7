"""EVENT (004, Cayuga): automata, the indexed executor, query families, partitions, value semantics."""
