"""The page at ``/`` in headless Chromium (Debian's chromium + chromium-driver through selenium)
against a real uvicorn server: results with per-stage ranks appear for ``/?q=``, the BM25 sliders
re-score live exactly as the server's formulas do, and screenshots show it.

Skipped locally when Chromium or its driver is missing; under ``CI=true`` that is a failure."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import zlib
from pathlib import Path

import pytest
from serve_fixtures import bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from serve_process import free_port, start  # noqa: E402

from ragfind.serve import bm25_rescore  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)


def _need_browser():
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", DRIVER)) if p is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs {', '.join(missing)} for the page test (apt chromium chromium-driver)")
        pytest.skip(f"{', '.join(missing)} not installed")


def png_pixels(path: Path) -> tuple:
    """``(width, height, distinct pixel values)`` of an 8-bit RGB(A) PNG (filters undone)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels = set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            pixels.update(bytes(line[i : i + 3]) for i in range(0, stride, bpp * 4))
        prev = line
    return width, height, pixels


@pytest.fixture
def server(hybrid_folder):
    port = free_port()
    script = Path(__file__).with_name("serve_hash.py")
    proc, url = start([str(script), str(hybrid_folder), str(port)], hybrid_folder.parent / "page.out", port)
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


@pytest.fixture
def browser():
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def test_page_results_explanation_and_sliders(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    query = "cats hunt mice"
    wait = WebDriverWait(browser, 30)
    browser.get(server + "/?q=" + query.replace(" ", "+"))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .result")) > 0)
    ref = httpx.post(server + "/search", json={"query": query, "k": 10, "highlight": True}).json()["results"]
    items = browser.find_elements(By.CSS_SELECTOR, "#results .result")
    assert [int(e.get_attribute("data-chunk-id")) for e in items] == [r["chunk_id"] for r in ref]
    chips = [c.text for c in items[0].find_elements(By.CSS_SELECTOR, ".chip")]
    assert chips[0].startswith(f"bm25 #{ref[0]['ranks']['bm25']}") and chips[1].startswith("dense #")
    assert "1/(60+1)" in items[0].find_element(By.CSS_SELECTOR, ".fusion-line").text
    # the matched words are marked in the passage text, at the offsets the server sent
    marks = [m.text for m in items[0].find_elements(By.CSS_SELECTOR, ".text mark")]
    text0 = ref[0]["text"]
    assert marks == [text0[a:b] for a, b in ref[0]["highlights"]] and marks
    shot1 = tmp_path / "results.png"
    browser.save_screenshot(str(shot1))

    chosen = ref[1]
    items[1].find_element(By.CSS_SELECTOR, "button.why").click()
    wait.until(ec.visibility_of_element_located((By.ID, "bm25")))
    ex = httpx.post(server + "/explain", json={"query": query, "chunk_id": chosen["chunk_id"]}).json()
    bm = ex["stages"]["bm25"]

    def page_score() -> float:
        return float(browser.find_element(By.ID, "bm25-score").get_attribute("data-value"))

    def contributions() -> dict:
        rows = browser.find_elements(By.CSS_SELECTOR, "#bm25-table tbody tr")
        return {r.get_attribute("data-term"): float(r.get_attribute("data-contribution")) for r in rows}

    # At the index's k1 and b the page's JavaScript gives the server's score.
    assert page_score() == pytest.approx(bm["score"], rel=1e-12)
    assert page_score() == pytest.approx(chosen["scores"]["bm25"], rel=1e-6)  # the float32 search score
    assert float(browser.find_element(By.ID, "cosine").get_attribute("data-value")) == pytest.approx(
        chosen["scores"]["dense"], abs=1e-6
    )
    assert "fusion" in browser.find_element(By.ID, "fusion-detail").text
    shot2 = tmp_path / "explain.png"
    browser.save_screenshot(str(shot2))

    k1 = browser.find_element(By.ID, "k1")
    k1.send_keys(*[Keys.ARROW_RIGHT] * 16)  # 1.2 -> 2.0 in steps of 0.05
    b = browser.find_element(By.ID, "b")
    b.send_keys(*[Keys.ARROW_LEFT] * 45)  # 0.75 -> 0.30
    wait.until(lambda d: d.find_element(By.ID, "b-value").text == "0.30")
    assert browser.find_element(By.ID, "k1-value").text == "2.00"
    want = bm25_rescore(bm, 2.0, 0.3)
    server_side = httpx.post(
        server + "/explain", json={"query": query, "chunk_id": chosen["chunk_id"], "k1": 2.0, "b": 0.3}
    ).json()["stages"]["bm25"]["rescored"]
    assert page_score() == pytest.approx(want["score"], rel=1e-12)
    assert page_score() == pytest.approx(server_side["score"], rel=1e-12)
    assert page_score() != pytest.approx(bm["score"], rel=1e-3)
    assert contributions() == pytest.approx({t["term"]: t["contribution"] for t in want["terms"]}, rel=1e-12)
    shot3 = tmp_path / "slid.png"
    browser.save_screenshot(str(shot3))

    for shot in (shot1, shot2, shot3):
        w, h, pixels = png_pixels(shot)
        assert (w, h) == (1280, 1000) or w >= 800
        assert len(pixels) > 20, f"{shot.name} looks blank"
    assert shot1.read_bytes() != shot2.read_bytes() != shot3.read_bytes()

    browser.find_element(By.ID, "reset").click()
    assert page_score() == pytest.approx(bm["score"], rel=1e-12)


def test_page_uses_the_key_from_the_query_string(hybrid_folder, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    script = str(Path(__file__).with_name("serve_hash.py"))
    args = [script, str(hybrid_folder), str(port), "--api-key", "pw"]
    proc, url = start(args, tmp_path / "keyed.out", port)
    try:
        browser.get(url + "/?q=dogs")
        WebDriverWait(browser, 30).until(lambda d: "API key" in d.find_element(By.ID, "status").text)
        browser.get(url + "/?key=pw&q=dogs")
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results .result"))
        assert (
            browser.find_elements(By.CSS_SELECTOR, "#results .result")[0].get_attribute("data-doc-id")
            == "dogs"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_page_shows_the_maxsim_alignment(hybrid_folder, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    script = str(Path(__file__).with_name("serve_hash.py"))
    proc, url = start([script, str(hybrid_folder), str(port), "--late"], tmp_path / "late.out", port)
    try:
        query = "cats hunt small mice"
        browser.get(url + "/?q=" + query.replace(" ", "+"))
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results .result"))
        first = browser.find_elements(By.CSS_SELECTOR, "#results .result")[0]
        assert "late" in first.text  # the re-ranker's score is shown
        first.find_element(By.CSS_SELECTOR, "button.why").click()
        wait.until(ec.visibility_of_element_located((By.ID, "late")))
        chunk = int(first.get_attribute("data-chunk-id"))
        late = httpx.post(url + "/explain", json={"query": query, "chunk_id": chunk}).json()["stages"]["late"]
        rows = browser.find_elements(By.CSS_SELECTOR, "#maxsim-table tbody tr")
        cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        assert [c[:2] for c in cells] == [[m["query_text"], m["doc_text"]] for m in late["matches"]]
        assert [float(c[2]) for c in cells] == pytest.approx(
            [m["similarity"] for m in late["matches"]], abs=1e-4
        )
        assert float(browser.find_element(By.ID, "maxsim-score").text) == pytest.approx(
            late["score"], abs=1e-4
        )
        shot = tmp_path / "maxsim.png"
        browser.save_screenshot(str(shot))
        assert len(png_pixels(shot)[2]) > 20
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
