"""Consolidation plans: analysis, admin approval, replacement-first execution (DESIGN.md section 6)."""
