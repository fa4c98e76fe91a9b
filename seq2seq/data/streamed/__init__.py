"""``data.streaming``: the split in two passes, the sharded id store, its batches and its build."""
