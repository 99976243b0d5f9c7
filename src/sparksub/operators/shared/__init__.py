"""Structures the families share: the A2B-tree's arrays, the 2-d point index, stabbing partitions (SSI) and their histograms, row validation."""
