"""The built site, as a reader's browser shows it: headless Chromium from Debian,
driven by Selenium.

Serves _build/html on localhost, opens every page, and checks: no console errors;
chapter pages show their code outputs, their sharding visualisations and their images;
each chapter's Colab button names a notebook that exists in this repository; search
finds "shard_map". Screenshots go to _build/screenshots/."""

import functools
import http.server
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHAPTERS = [entry["file"] for entry in TOC.get("chapters", [])]
PAGES = [TOC["root"]] + CHAPTERS
# The <pre> that visualize_array_sharding renders.
RICH_SHARDING = "font-family:Menlo,'DejaVu Sans Mono'"


def notebook_outputs(docname):
    """(code cells with outputs, images, sharding visualisations) stored in the
    chapter's notebook."""
    nb = json.loads((ROOT / f"{docname}.ipynb").read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs")]
    outputs = [o for c in cells for o in c["outputs"]]
    images = sum(
        any(k in o.get("data", {}) for k in ("image/png", "image/svg+xml"))
        for o in outputs
    )
    shardings = sum(
        RICH_SHARDING in "".join(o.get("data", {}).get("text/html", ""))
        for o in outputs
    )
    return len(cells), images, shardings


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        pytest.fail("no built site: run `make book` first (make test does)")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(SITE)
    )
    handler.log_message = lambda *args, **kwargs: None  # quiet
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium must never try to download a browser or driver
    os.environ["SE_OFFLINE"] = "true"
    profile = tempfile.mkdtemp(prefix="book-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1600",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


# MathJax 2's HTML-CSS output probes whether its web fonts have loaded by comparing them
# with a font-face named MathJax_Blank whose source is 'about:blank'; Chromium refuses
# that source and logs it. The probe works all the same (formulas are checked to be
# typeset below), so these two messages, and only these, are not errors of the site.
MATHJAX_BLANK_FONT = re.compile(r"font at 'about:blank'|^about:blank - Failed to load")


def load(browser, url):
    browser.get(url)
    # `make test` runs this beside the nbval passes, which keep the cores busy: wait by
    # the clock, up to a deadline far above an idle machine's load time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if browser.execute_script("return document.readyState") == "complete":
            break
        time.sleep(0.05)
    return [
        e
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and not MATHJAX_BLANK_FONT.search(e["message"])
    ]


@pytest.mark.parametrize("docname", PAGES)
def test_page_loads_no_script_from_another_host(docname):
    """Pages work offline: a script from a CDN fails to load without network, and
    whether Chromium reports that before the page counts as loaded depends on DNS timing
    (MathJax did this)."""
    html = (SITE / f"{docname}.html").read_text()
    remote = re.findall(r"<script[^>]*\bsrc=[\"'](?:https?:)?//[^\"']+", html)
    assert not remote, f"{docname}: loads scripts from other hosts: {remote}"


# a common laptop screen: no code or output may scroll sideways there
LAPTOP = (1366, 768)
# a common phone (CSS pixels): the page may not scroll sideways there (a code block may
# scroll inside its own box: 88 columns cannot fit a phone)
PHONE = (390, 844)


def sideways(browser) -> list[str]:
    """Code cells, outputs and the page itself that are wider than their box, as
    'selector: content px > box px' strings."""
    return browser.execute_script("""
        const found = [];
        const page = document.documentElement;
        if (page.scrollWidth > window.innerWidth + 1)
            found.push(`page: ${page.scrollWidth} > ${window.innerWidth}`);
        const boxes = ".cell_input pre, .cell_output pre, .cell_output .output, "
                      + ".cell_output div.highlight, div.highlight pre";
        for (const el of document.querySelectorAll(boxes)) {
            if (el.offsetParent === null) continue;           // folded (hidden) cells
            if (el.scrollWidth > el.clientWidth + 1)
                found.push(`${el.closest('.cell_output') ? 'output' : 'code'}: `
                           + `${el.scrollWidth} > ${el.clientWidth}: `
                           + el.textContent.split('\\n')
                               .reduce((a, b) => (b.length > a.length ? b : a), '')
                               .slice(0, 60));
        }
        return found;""")


def math_nodes(docname) -> int:
    """Formulas Sphinx wrote into the page (inline and display)."""
    html = (SITE / f"{docname}.html").read_text()
    return len(re.findall(r'class="math[ "]', html))


MATH_PAGES = [d for d in PAGES if (SITE / f"{d}.html").exists() and math_nodes(d)]


def test_some_page_has_formulas():
    assert MATH_PAGES, (
        "no page has formulas: the typesetting check below would test nothing"
    )


def red_error_types(docname) -> list[str]:
    """Exception types that expect_error stored in red in the chapter's notebook."""
    nb = json.loads((ROOT / f"{docname}.ipynb").read_text())
    texts = [
        "".join(o.get("text", ""))
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
    ]
    return [m for t in texts for m in re.findall(r"\x1b\[31m(\w+)\x1b\[0m: ", t)]


def look_at(browser, url, docname) -> dict:
    """What a reader's laptop screen shows of one page, read in one visit: console
    errors, title, output blocks, sharding visualisations, images, the Colab and
    Kaggle links, typeset formulas, red error types, and (every folded cell unfolded
    last) what scrolls sideways."""
    from selenium.webdriver.common.by import By

    seen = {"errors": load(browser, url)}
    # MathJax typesets after load (deadline: see load)
    deadline = time.monotonic() + (60 if docname in MATH_PAGES else 0)
    while time.monotonic() < deadline:
        if browser.execute_script(
            "return !!(window.MathJax && MathJax.Hub && MathJax.Hub.queue"
            " && MathJax.Hub.queue.pending === 0 && MathJax.Hub.queue.running === 0"
            " && document.querySelectorAll('span.MathJax').length > 0)"
        ):
            break
        time.sleep(0.05)
    browser.save_screenshot(str(SHOTS / f"{docname.replace('/', '_')}.png"))
    titles = browser.find_elements(By.CSS_SELECTOR, "article h1")
    seen["title"] = titles[0].text.strip() if titles else ""
    outputs = browser.find_elements(By.CSS_SELECTOR, ".cell_output")
    seen["outputs"] = len(outputs)
    seen["first output"] = outputs[0].text if outputs else ""
    seen["shardings"] = [
        e.is_displayed() and "CPU 0" in e.text
        for e in browser.find_elements(By.CSS_SELECTOR, ".cell_output pre")
        if "DejaVu Sans Mono" in (e.get_attribute("style") or "")
    ]
    images = browser.find_elements(By.CSS_SELECTOR, ".cell_output img")
    seen["images shown"] = sum(
        browser.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth > 0", img
        )
        for img in images
    )
    seen["no alt"] = [
        img.get_attribute("src").rsplit("/", 1)[-1]
        for img in images
        if len((img.get_attribute("alt") or "").split()) < 8
    ]
    seen["links"] = {
        a.get_attribute("href")
        for a in browser.find_elements(
            By.CSS_SELECTOR,
            "a[href*='colab.research.google.com'], a[href*='kaggle.com']",
        )
    }
    seen["typeset"] = browser.execute_script(
        "return document.querySelectorAll('span.MathJax').length"
    )
    seen["failed formulas"] = browser.execute_script(
        "return document.querySelectorAll('.MathJax_Error, .merror').length"
    )
    seen["red"] = browser.execute_script("""
        const out = [];
        for (const span of document.querySelectorAll('.cell_output span')) {
            const [r, g, b] = getComputedStyle(span).color.match(/\\d+/g).map(Number);
            if (r > 150 && g < 100 && b < 100 && /^\\w+$/.test(span.textContent))
                out.push(span.textContent);
        }
        return out;""")
    if docname == CHAPTERS[0]:
        seen["search boxes"] = browser.execute_script("""
            return [...document.querySelectorAll(
                'input[type=search], .search-button-field, .search-button')]
                .filter(e => e.offsetParent !== null
                             && e.getBoundingClientRect().width > 0).length;""")
        browser.save_screenshot(str(SHOTS / "laptop.png"))
    # Unfold every folded cell, so that its code is measured too.
    browser.execute_script(
        "document.querySelectorAll('details').forEach(d => d.open = true);"
    )
    seen["sideways"] = sideways(browser)
    return seen


def look_on_a_phone(browser, docname) -> dict:
    """The page's width on a phone, and what sticks out (to say what to fix): the
    page look_at has just read, its window narrowed to a phone's, folded cells open."""
    width = browser.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth];"
    )
    wide = browser.execute_script("""
        const w = window.innerWidth, found = [];
        for (const el of document.querySelectorAll('article *')) {
            const r = el.getBoundingClientRect();
            if (r.right > w + 1 && el.offsetParent !== null
                && !el.closest('pre, .highlight, .MathJax_Display, '
                               + '.pst-scrollable-table-container, .table-wrapper'))
                found.push(el.tagName + ': ' + el.textContent.slice(0, 50));
        }
        return found.slice(0, 3);""")
    if docname == CHAPTERS[0]:
        browser.save_screenshot(str(SHOTS / "phone.png"))
    return {"width": width, "wide": wide}


@pytest.fixture(scope="module")
def pages(server, browser) -> dict:
    """Every page loaded once (not once per check: a chapter page takes seconds to load
    and typeset), read on a laptop screen, then narrowed to a phone's width and read
    again: docname -> what each showed. The phone's reading is of the reflowed page, as
    CSS lays it out at that width; a fresh load at that width lays it out the same (the
    theme's narrow layout is CSS media queries), at twice the browser's work."""
    seen = {}
    try:
        for docname in PAGES:
            browser.set_window_size(*LAPTOP)
            seen[docname] = look_at(browser, f"{server}/{docname}.html", docname)
            browser.set_window_size(*PHONE)
            seen[docname].update(look_on_a_phone(browser, docname))
    finally:
        browser.set_window_size(1280, 1600)
    return seen


@pytest.mark.parametrize("docname", PAGES)
def test_page_loads_without_console_errors(pages, docname):
    errors = pages[docname]["errors"]
    assert not errors, f"{docname}: console errors {[e['message'] for e in errors]}"
    assert pages[docname]["title"], f"{docname}: no visible title"


@pytest.mark.parametrize("docname", CHAPTERS)
def test_chapter_shows_its_outputs(pages, docname):
    n_cells, n_images, n_shardings = notebook_outputs(docname)
    seen = pages[docname]
    # One output block per code cell that stored outputs (hidden-input cells included).
    assert seen["outputs"] == n_cells, (
        f"{docname}: {seen['outputs']} output blocks shown, "
        f"{n_cells} cells have outputs"
    )
    assert "simulated CPU devices" in seen["first output"], (
        f"{docname}: the bootstrap line is not the first output"
    )
    assert len(seen["shardings"]) == n_shardings, (
        f"{docname}: {len(seen['shardings'])} sharding visualisations shown, "
        f"{n_shardings} stored"
    )
    assert all(seen["shardings"]), f"{docname}: a visualisation is empty"
    assert seen["images shown"] == n_images, (
        f"{docname}: {seen['images shown']} of {n_images} stored images shown"
    )
    assert not seen["no alt"], f"{docname}: figures without alt text: {seen['no alt']}"


@pytest.mark.parametrize("docname", CHAPTERS)
def test_colab_button_names_an_existing_notebook(pages, docname):
    links = {u for u in pages[docname]["links"] if "colab.research.google.com" in u}
    assert len(links) == 1, f"{docname}: expected one Colab link, found {links}"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    repo = config["url"].removeprefix("https://github.com/")
    match = re.fullmatch(
        rf"https://colab\.research\.google\.com/github/{re.escape(repo)}/blob/"
        rf"{config['branch']}/(.+\.ipynb)",
        links.pop(),
    )
    assert match, (
        f"{docname}: Colab link does not point at {repo} on branch {config['branch']}"
    )
    assert match.group(1) == f"{docname}.ipynb" and (ROOT / match.group(1)).exists()


@pytest.mark.parametrize("docname", CHAPTERS)
def test_kaggle_button_names_the_same_notebook(pages, docname):
    links = {u for u in pages[docname]["links"] if "kaggle.com" in u}
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert links == {
        f"https://kaggle.com/kernels/welcome?src={config['url']}/blob/"
        f"{config['branch']}/{docname}.ipynb"
    }, f"{docname}: Kaggle links {links}"


@pytest.mark.parametrize("docname", PAGES)
def test_nothing_scrolls_sideways_on_a_laptop_screen(pages, docname):
    wide = pages[docname]["sideways"]
    assert not wide, f"{docname} at {LAPTOP[0]}x{LAPTOP[1]}: {wide[:5]}"


@pytest.mark.parametrize("docname", MATH_PAGES)
def test_formulas_are_typeset_offline(pages, docname):
    """MathJax (served with the site, see _ext/book_site_fixes.py) typesets every
    formula."""
    seen = pages[docname]
    assert seen["typeset"] >= math_nodes(docname), (
        f"{docname}: {seen['typeset']} of {math_nodes(docname)} formulas typeset"
    )
    assert not seen["failed formulas"], (
        f"{docname}: {seen['failed formulas']} formulas failed to typeset"
    )


@pytest.mark.parametrize("docname", [d for d in CHAPTERS if red_error_types(d)])
def test_error_types_show_in_red(pages, docname):
    """expect_error prints the exception type in red; myst-nb renders the colour."""
    shown = pages[docname]["red"]
    assert shown == red_error_types(docname), (
        f"{docname}: red on the page {shown}, stored {red_error_types(docname)}"
    )


@pytest.mark.parametrize("docname", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(pages, docname):
    width, wide = pages[docname]["width"], pages[docname]["wide"]
    assert width[0] <= width[1] + 1, f"{docname} at {PHONE}: {width} {wide}"


def test_one_search_box_on_a_laptop_screen(pages):
    visible = pages[CHAPTERS[0]]["search boxes"]
    assert visible == 1, f"{visible} search boxes or buttons show at {LAPTOP}"


def test_search_finds_shard_map(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    errors = load(browser, f"{server}/search.html?q=shard_map")
    results = WebDriverWait(browser, 20).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#search-results ul.search li")
    )
    browser.save_screenshot(str(SHOTS / "search.png"))
    assert not errors, [e["message"] for e in errors]
    assert any("pmap" in r.text for r in results), [r.text for r in results]
