"""Inventory sync: what the cluster backend reports -> Node, GPU and Partition rows."""
