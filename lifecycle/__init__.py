"""The lifecycle toolkit shared by every app: the audit trail, persisted state transitions, single-run locks."""
