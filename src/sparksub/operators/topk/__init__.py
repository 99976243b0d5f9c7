"""RANGE_TOPK (002): influence regions and the Paint family."""
