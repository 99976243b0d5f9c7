"""The server's web page (issue 17 item 5) in a real headless Chromium -- Debian's ``/usr/bin/chromium``,
driven by Playwright (which downloads no browser here: it is given the executable).  The page must show the
client's subscriptions by class and group, the live notification rate, EXPLAIN of a chosen subscription and
a live tail (Server-Sent Events) of its notifications as they are published.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent,   # engines without the extension in both runs
              pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium "
                                                                  "(CI's .ci/run installs it)")]


@pytest.fixture(scope="module")
def served(spark, tmp_path_factory):
    from sparksub import Engine
    from sparksub.client import connect
    from sparksub.serve import BackgroundServer, ServeConfig, create_app
    from sparksub.serve.tokens import issue_token
    path = tmp_path_factory.mktemp("page")
    tokens = {"ops": issue_token(path, "ops", "admin"), "erin": issue_token(path, "erin")}
    engine = Engine(spark, catalyst=False, path=path)
    server = BackgroundServer(create_app(engine, ServeConfig(heartbeat_seconds=1.0))).start()
    ops = connect(server.url, tokens["ops"])
    ops.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    engine.load("stock", [{"symbol": f"S{i}", "risk": float(i * 10), "per": float(100 - i)} for i in range(8)])
    erin = connect(server.url, tokens["erin"])
    erin.sql("CREATE SUBSCRIPTION low AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 50")
    erin.sql("CREATE SUBSCRIPTION top AS SELECT symbol, per FROM stock WHERE risk BETWEEN 0 AND 70 "
             "ORDER BY per LIMIT 2")
    ops.sql("CREATE TABLE ticks (Name STRING, Price DOUBLE)")
    erin.sql("CREATE EVENT QUERY jump AS SELECT * FROM ticks NEXT{$1.Name = $2.Name} ticks")
    yield {"server": server, "tokens": tokens, "ops": ops}
    server.stop()
    engine.close()


def test_page_shows_groups_rate_explain_and_a_live_tail(served, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) drives Chromium")
    url, token = served["server"].url, served["tokens"]["erin"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            errors: list = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{url}/ui?token={token}")
            page.wait_for_function("document.getElementById('whoami').textContent.includes('erin')", timeout=30_000)
            assert page.text_content("#whoami") == "erin (client)"
            # subscriptions by class and group: hers, one row per group
            page.wait_for_selector("#groups tbody tr")
            rows = page.eval_on_selector_all("#groups tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
            assert sorted((r[0], r[3]) for r in rows) == [("EVENT", "1"), ("RANGE_MIN", "1"), ("RANGE_TOPK", "1")]
            # EXPLAIN of a chosen subscription, and its live tail
            page.select_option("#subscription-select", "low")
            page.wait_for_function("document.getElementById('explain').textContent.includes('RANGE_MIN')",
                                   timeout=30_000)
            assert "== Subscription: low ==" in page.text_content("#explain")
            assert page.is_hidden("#explain-graph")   # a drawing is for event queries only
            page.wait_for_function("document.getElementById('tail-state').textContent === '(live)'", timeout=30_000)
            summary = served["ops"].publish("stock", [{"symbol": "S2", "risk": 20.0, "per": 3.5},
                                                      {"symbol": "S6", "risk": 60.0, "per": 0.5}])
            assert summary["notifications"] >= 2   # low's new min; top's entries (not tailed: another subscription)
            page.wait_for_selector("#tail li", timeout=30_000)
            tail = page.eval_on_selector_all("#tail li", "ls => ls.map(l => l.textContent)")
            assert len(tail) == 1 and "value=3.5" in tail[0] and "op=update" in tail[0], tail
            # the live rate: the page polls /stats each second
            page.wait_for_function("Number(document.getElementById('total').textContent) >= 2", timeout=15_000)
            page.wait_for_function("Number(document.getElementById('connections').textContent) >= 1")
            # an event query: its EXPLAIN text and its automata drawn (format=svg, laid out by Graphviz)
            page.select_option("#subscription-select", "jump")
            page.wait_for_function("document.getElementById('explain').textContent.includes('jump')", timeout=30_000)
            if shutil.which("dot"):   # the server is this process: it has dot when the test does
                page.wait_for_function("!document.getElementById('explain-graph').hidden && "
                                       "document.getElementById('explain-svg').naturalWidth > 0", timeout=30_000)
            else:
                page.wait_for_function("document.getElementById('explain-graph-note').textContent.includes('501')",
                                       timeout=30_000)
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            if os.environ.get("SPARKSUB_KEEP_SCREENSHOT"):
                Path(os.environ["SPARKSUB_KEEP_SCREENSHOT"]).write_bytes((tmp_path / "page.png").read_bytes())
            assert not errors, errors
            # a bad token: the page says so and shows nothing of anyone's
            page.goto(f"{url}/ui?token=ssk_forged")
            page.wait_for_function("document.getElementById('error').textContent.includes('401')", timeout=30_000)
            assert page.eval_on_selector_all("#groups tbody tr", "rs => rs.length") == 0
        finally:
            browser.close()
    assert httpx.get(f"{url}/").headers["content-type"].startswith("text/html")
