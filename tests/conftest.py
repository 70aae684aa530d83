import pytest


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Lets fixtures see whether the test body failed (to dump service logs).
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
