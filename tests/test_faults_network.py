"""Network faults between the Hub client and the loopback Hub: a connection dropped mid-file, 5xx
answers, a slow server -- retried within limits, then a clear error; and eviction that keeps what was
cached before the scan.

The faults come from :class:`tests._faults.FaultProxy` standing in front of the upstream. The proxy's
own behaviour is tested here against a stub upstream; the HubSource / scan tests use the session
``local_hub`` fixture of ``tests/conftest.py`` as the upstream and are skipped where it is absent.
"""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.errors import HubUnreachableError
from tests._checkpoints import SUITE
from tests._faults import FaultProxy, FaultRule, StubUpstream

BLOB = bytes(range(256)) * 400  # 102,400 bytes


# ------------------------------------------------------------------------------------------------
# the proxy itself
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def stub():
    s = StubUpstream({"/blob": BLOB})
    yield s
    s.close()


def _get(url: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_proxy_forwards_and_logs(stub):
    with FaultProxy(stub.url) as p:
        assert _get(p.url + "/blob") == (200, BLOB)
        assert _get(p.url + "/blob", {"Range": "bytes=100-"}) == (206, BLOB[100:])
        assert _get(p.url + "/nothing")[0] == 404
    assert [a for _, _, a in p.log] == ["forward"] * 3


def test_proxy_answers_5xx_n_times(stub):
    with FaultProxy(stub.url, [FaultRule(r"GET /blob", status=503, times=2)]) as p:
        assert [_get(p.url + "/blob")[0] for _ in range(3)] == [503, 503, 200]
    assert [a for _, _, a in p.requests("/blob")] == ["status 503", "status 503", "forward"]


def test_proxy_drops_the_connection_mid_body(stub):
    with FaultProxy(stub.url, [FaultRule(r"GET /blob", drop_after=1000)]) as p:
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            _get(p.url + "/blob")
        assert _get(p.url + "/blob") == (200, BLOB)  # the rule applied once
    assert p.log[0][2] == "drop after 1000"


def test_proxy_delays(stub):
    with FaultProxy(stub.url, [FaultRule(r"GET /blob", delay=0.6, times=None)]) as p:
        t0 = time.monotonic()
        assert _get(p.url + "/blob")[1] == BLOB
        assert time.monotonic() - t0 >= 0.6
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            _get(p.url + "/blob", timeout=0.2)


# ------------------------------------------------------------------------------------------------
# HubSource and scan behind the proxy, upstream: the loopback Hub (tests/conftest.py: local_hub)
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def hub(request):
    """The ``local_hub`` fixture, or a skip where tests/conftest.py does not provide it."""
    try:
        return request.getfixturevalue("local_hub")
    except pytest.FixtureLookupError:
        pytest.skip("needs the local_hub fixture (tests/conftest.py: loopback Hub over olah)")


@pytest.fixture
def proxy(hub, monkeypatch):
    """A FaultProxy in front of the loopback Hub, with huggingface_hub pointed at it and short timeouts."""
    import huggingface_hub.constants as c

    with FaultProxy(hub.url) as p:
        monkeypatch.setattr(c, "ENDPOINT", p.url)
        monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE", p.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(c, "HF_HUB_ETAG_TIMEOUT", 1)
        monkeypatch.setattr(c, "HF_HUB_DOWNLOAD_TIMEOUT", 1)
        yield p


def _source(hub, tmp_path):
    from ckptgeo.sources.hub import HubSource

    return HubSource(hub.repo_id, cache_dir=tmp_path / "cache")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rev(src, name):
    return next(r for r in src.revisions() if r.name == name)


def test_5xx_on_listing_is_retried(hub, proxy, tmp_path):
    proxy.add(FaultRule(r"GET /api/models/.*/refs", status=503, times=2))
    src = _source(hub, tmp_path)
    assert {r.name for r in src.revisions()} == {f"step{s}" for s in hub.steps}
    assert len(proxy.requests(r"/refs")) == 3


def test_5xx_forever_gives_a_clear_error_within_limits(hub, proxy, tmp_path):
    proxy.add(FaultRule(r"GET /api/models/.*/refs", status=502, times=None))
    t0 = time.monotonic()
    with pytest.raises(HubUnreachableError, match=r"listing branches of .* failed after 3 attempts") as exc:
        _source(hub, tmp_path).revisions()
    assert proxy.url in str(exc.value) and time.monotonic() - t0 < 30
    assert len(proxy.requests(r"/refs")) <= 3 * 5  # ours x any the client makes itself


def test_connection_dropped_mid_file_is_resumed(hub, proxy, tmp_path):
    src = _source(hub, tmp_path)
    rev = _rev(src, "step1")
    proxy.add(FaultRule(r"GET .*/resolve/.*model\.safetensors", drop_after=4096, times=2))
    folder = src.fetch(rev)
    assert _sha(folder / "model.safetensors") == hub.repo.weight_sha256["step1"]
    assert [a for _, _, a in proxy.requests(r"GET .*model\.safetensors")][:2] == ["drop after 4096"] * 2


@pytest.mark.slow
def test_connection_always_dropped_gives_a_clear_error(hub, proxy, tmp_path):
    src = _source(hub, tmp_path)
    rev = _rev(src, "step1")
    proxy.add(FaultRule(r"GET .*/resolve/.*model\.safetensors", drop_after=4096, times=None))
    t0 = time.monotonic()
    with pytest.raises(HubUnreachableError, match=r"downloading .*@step1 failed after 3 attempts"):
        src.fetch(rev)
    assert time.monotonic() - t0 < 120
    snap = list((tmp_path / "cache").rglob("snapshots/*/model.safetensors"))
    assert snap == []  # no truncated file where a reader would look


def test_slow_server_within_the_timeout_succeeds(hub, proxy, tmp_path):
    proxy.add(FaultRule(r".", delay=0.3, times=None))
    src = _source(hub, tmp_path)
    folder = src.fetch(_rev(src, "step2"))
    assert _sha(folder / "model.safetensors") == hub.repo.weight_sha256["step2"]


def test_server_slower_than_the_timeout_is_retried(hub, proxy, tmp_path):
    src = _source(hub, tmp_path)
    rev = _rev(src, "step2")
    rule = proxy.add(FaultRule(r"model\.safetensors", delay=1.5, times=1))  # > the 1 s timeouts
    folder = src.fetch(rev)
    assert rule.hits == 1 and _sha(folder / "model.safetensors") == hub.repo.weight_sha256["step2"]


@pytest.mark.slow
def test_server_always_slower_than_the_timeout_gives_a_clear_error(hub, proxy, tmp_path):
    proxy.add(FaultRule(r"model\.safetensors", delay=1.5, times=None))
    src = _source(hub, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(HubUnreachableError, match=r"downloading .*@step4 failed after 3 attempts"):
        src.fetch(_rev(src, "step4"))
    assert time.monotonic() - t0 < 120


@pytest.mark.slow
def test_scan_records_a_revision_the_network_never_delivers(hub, proxy, tmp_path):
    from ckptgeo.engine.scan import scan

    commit = hub.commits["step2"]
    proxy.add(FaultRule(rf"GET .*/resolve/{commit}/model\.safetensors", status=503, times=None))
    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(hub.repo_id, out=out, revisions="step1,step2,step4", suites=(SUITE,), n_samples=8)
    assert res.measured == ["step1", "step4"] and list(res.failed) == ["step2"]
    assert res.failed["step2"].startswith("HubUnreachableError: downloading") and "step2" in res.failed["step2"]
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step2", "status"] == "failed"
    proxy.rules.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(hub.repo_id, out=out, revisions="step1,step2,step4", suites=(SUITE,), n_samples=8)
    assert res.measured == ["step2"]


def test_eviction_keeps_revisions_cached_before_the_scan(hub, tmp_path):
    from huggingface_hub import scan_cache_dir, snapshot_download

    from ckptgeo.engine.scan import scan
    from ckptgeo.sources.hub import HubSource

    cache = tmp_path / "cache"
    snapshot_download(hub.repo_id, revision=hub.commits["step1"], cache_dir=cache)
    src = HubSource(hub.repo_id, cache_dir=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(src, out=tmp_path / "ds", revisions="step1,step2", suites=(SUITE,), n_samples=8)
    assert res.measured == ["step1", "step2"]
    commits = {r.commit_hash for repo in scan_cache_dir(cache).repos for r in repo.revisions}
    assert hub.commits["step1"] in commits  # the user's own download stays
    assert hub.commits["step2"] not in commits  # what the scan fetched is evicted


def test_429_with_retry_after_is_waited_out_and_the_scan_succeeds(hub, proxy, tmp_path, caplog):
    from tests._faults import quiet_scan

    rule = proxy.add(FaultRule(r"GET /api/models/.*/refs", status=429, times=2, headers={"Retry-After": "1"}))
    dl = proxy.add(FaultRule(r"GET .*/resolve/.*model\.safetensors", status=429, times=2, headers={"Retry-After": "1"}))
    t0 = time.monotonic()
    res = quiet_scan(hub.repo_id, tmp_path / "ds", revisions="step4", prefetch=0)
    waited = time.monotonic() - t0
    assert res.measured == ["step4"] and not res.failed
    assert rule.hits == 2 and len(proxy.requests(r"/refs")) == 3, "listed again after each 429"
    assert dl.hits == 2, "the download was answered 429 twice, then served"
    assert waited >= 2.0, "Retry-After: 1 was honoured on the listing"
    assert "rate limited (HTTP 429); waiting 1.0 s" in caplog.text


def test_429_forever_gives_a_clear_error_after_a_bounded_wait(hub, proxy, tmp_path, monkeypatch):
    import ckptgeo.sources.hub as hubmod

    monkeypatch.setattr(hubmod, "MAX_RATE_LIMIT_WAIT", 2.5)
    proxy.add(FaultRule(r"GET /api/models/.*/refs", status=429, times=None, headers={"Retry-After": "1"}))
    with pytest.raises(HubUnreachableError, match=r"rate limited .*HTTP 429.* after waiting 2 s"):
        _source(hub, tmp_path).revisions()
    assert len(proxy.requests(r"/refs")) == 3, "waited 1 s twice, then gave up instead of waiting past the bound"
