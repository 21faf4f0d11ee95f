"""Consolidation plans: analysis, admin approval, replacement-first execution (docs/design.md section 6)."""
