"""The words of a consolidation plan: its status."""
from nodes.vocabulary import LabelledStrEnum


class PlanStatus(LabelledStrEnum):
    PROPOSED = "proposed", "Proposed (waiting for an admin)"
    APPROVED = "approved", "Approved"
    EXECUTING = "executing", "Executing"
    EXECUTED = "executed", "Executed"
    ABORTED = "aborted", "Aborted"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


FINAL_STATUSES = (PlanStatus.EXECUTED, PlanStatus.ABORTED, PlanStatus.REJECTED, PlanStatus.EXPIRED)
