import pytest

from harness import Service, WireRecorder


@pytest.fixture
def service():
    """A fresh service per test; stopped afterwards, and its log checked for panics."""
    svc = Service()
    try:
        yield svc
    finally:
        alive = svc.proc.poll() is None
        svc.stop()
        log = svc.log()
        # Shown by pytest only when the test failed.
        print(f"--- service log (port {svc.port}) ---\n{log[-20000:]}")
        assert "panicked" not in log, f"service panicked:\n{log}"
        assert alive, f"service had exited during the test:\n{log}"


@pytest.fixture
def wire(service):
    """A transparent recording proxy in front of the service."""
    rec = WireRecorder(service.port)
    try:
        yield rec
    finally:
        rec.close()
        print(f"--- wire (proxy port {rec.port}) ---")
        for r in rec.requests():
            print(f"  {r}")
        for e in rec.events:
            print(f"  event: {e}")
