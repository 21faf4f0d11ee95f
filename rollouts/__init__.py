"""Rolling node reconfiguration (issue 9, docs/design.md section 5): the ``RollingUpdate`` state machine,
its preview and its API. It sits above ``nodes`` (what a node runs) and ``scheduler`` (what runs
where), because a rollout changes a node's config and moves deployments off it first.
"""
