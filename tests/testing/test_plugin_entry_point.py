"""The pytest plugin is found through its ``pytest11`` entry point.

A fresh project (pytester's temporary directory: no ``conftest.py``, no
``pytest_plugins``) sees every fixture of ``leasegate.testing.pytest_plugin``
and can use them; ``-p no:leasegate`` turns the plugin off.
"""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

FIXTURES = (
    "moto_server",
    "moto_iam_server",
    "reference_cloud",
    "cloud_link",
    "reference_cloud_ws",
    "consumers_root",
)

USER_TEST = """
import anyio
import pytest


def test_a_thread_end_and_a_fresh_root(cloud_link, consumers_root, reference_cloud):
    assert cloud_link.cloud is reference_cloud
    end = cloud_link.thread_end()
    end.close()
    assert consumers_root.base.is_dir()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_async_end(anyio_backend, cloud_link):
    end = cloud_link.async_end()
    await end.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await end.receive()
"""


def test_the_entry_point_gives_a_fresh_project_every_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    listed = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider", timeout=120)
    listed.assert_outcomes()
    text = listed.stdout.str()
    assert re.search(r"^plugins: .*\bleasegate-", text, re.M)  # the entry point's name
    assert "fixtures defined from leasegate.testing.pytest_plugin" in text
    for name in FIXTURES:
        pattern = rf"^{name}( \[session scope\])? -- .*leasegate/testing/pytest_plugin\.py:"
        assert re.search(pattern, text, re.M), name
    ran = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    ran.assert_outcomes(passed=3)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_root(consumers_root):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:leasegate", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'consumers_root' not found*"])
