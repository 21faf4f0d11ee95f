import pytest


@pytest.fixture(autouse=True)
def fresh_exempt_namespaces():
    """Each process reads the exempt namespaces every few seconds (scheduler.admission): a test starts afresh."""
    from scheduler.admission import forget_exempt_namespaces

    forget_exempt_namespaces()
    yield
    forget_exempt_namespaces()
