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
    SUPERSEDED = "superseded", "Superseded (a newer analysis replaced it)"


FINAL_STATUSES = (PlanStatus.EXECUTED, PlanStatus.ABORTED, PlanStatus.REJECTED, PlanStatus.EXPIRED,
                  PlanStatus.SUPERSEDED)
# Plans that hold their moves: approved, or being carried out. No other plan may touch their nodes.
IN_FLIGHT_STATUSES = (PlanStatus.APPROVED, PlanStatus.EXECUTING)

P = PlanStatus
# The plan's state machine (``consolidation.models.PLAN_STATES``): to-status -> the statuses it may come from.
PLAN_FROM: dict[str, tuple[str, ...]] = {
    P.APPROVED: (P.PROPOSED,),
    P.REJECTED: (P.PROPOSED,),
    P.EXPIRED: (P.PROPOSED,),
    P.SUPERSEDED: (P.PROPOSED,),  # consolidation.analysis: a newer plan moves some of the same
    P.EXECUTING: (P.APPROVED,),
    P.EXECUTED: (P.EXECUTING,),
    P.ABORTED: (P.APPROVED, P.EXECUTING),
}
