"""Inventory sync: what the cluster backend reports -> Node, GPU and Partition rows.

One concern per module:

- ``sync``: ``sync_inventory``, the entry point: reads the cluster, then runs the passes below
  in one transaction.
- ``report``: ``SyncReport``, what one sync wrote.
- ``labels``: ``node_sharing``, a node's sharing mode read from its labels (``NodeSharing``).
- ``shapes``: partition geometry (``PartitionShape``): the fixed partitions a GPU offers under
  its node's mode, MIG instances, weighted MPS shares.
- ``pods``: the devices a pod holds, from its resource requests and gpuplane's annotations.
- ``plan``: the working state of one sync: rows as loaded and as they should be.
- ``node_rows``: the node pass (create, update, heartbeat, delete or keep gone nodes).
- ``gpu_rows``: the GPU and partition passes: match rows to the cluster, write the differences.
- ``binding``: which pod uses which partition.
- ``audit``: the audit events of what a sync changed (stored in one INSERT per sync).

Who holds a partition is asked through ``nodes.holds``, never by naming the scheduler's models.
"""
