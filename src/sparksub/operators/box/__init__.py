"""BOX_MIN / BOX_MAX and BOX_TOPK: range-MIN and top-k over 2-d boxes."""
