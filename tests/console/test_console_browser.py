"""The web console in headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by selenium): pages render with their style sheet, screenshots are checked (a real
image of the window, not blank, the header's colour, the confirmation box's red border
only where a confirmation is asked), the rendered DOM has the topics, partitions, records
and lag real clients made, and an action done through the forms happens only once its
confirmation is clicked. Screenshots are kept in the test's temporary directory."""

from __future__ import annotations

import io
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.admin.clients import TIMEOUT, admin, create_topic, unique
from tests.console.helpers import commit_offset, committed_offsets, console_url

RECORDS = 5
COMMITTED = 3
WINDOW = (1280, 900)
HEADER_RGB = (0x1F, 0x3A, 0x5F)  # console.css: header
CONFIRM_RGB = (0xB3, 0x26, 0x1E)  # console.css: .confirm border, button.danger


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Any) -> dict[str, Any]:
    broker = module_broker_factory(metrics_listener="127.0.0.1:0")
    topic, group = unique("payments"), unique("billing")
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, b'{"amount": %d}' % (i * 10), key=b"customer-%d" % i,
                         partition=0, headers=[("source", b"test")])
    assert producer.flush(TIMEOUT) == 0
    commit_offset(broker.bootstrap, group, topic, 0, COMMITTED)
    return {"broker": broker, "url": console_url(broker), "topic": topic, "group": group}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                     "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(
        shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


def open_page(browser: Any, cluster: dict[str, Any], path: str, **params: Any) -> None:
    query = urllib.parse.urlencode(params)
    browser.get(cluster["url"] + path + (f"?{query}" if query else ""))


def follow(browser: Any, element: Any) -> None:
    """Click (or submit) ``element`` and wait for the page it leads to: a click returns
    before the navigation it starts has replaced the document."""
    old = browser.find_element(By.TAG_NAME, "html")
    if element.tag_name == "input":
        element.submit()
    else:
        element.click()
    wait = WebDriverWait(browser, TIMEOUT)
    wait.until(lambda _: detached(old))
    wait.until(lambda b: b.execute_script("return document.readyState") == "complete")


def detached(element: Any) -> bool:
    """Whether ``element`` has left the document. Chromium reports a node of a page being
    replaced either as stale or, mid-navigation, as "does not belong to the document":
    selenium's ``staleness_of`` knows only the first."""
    try:
        element.is_enabled()
    except WebDriverException:
        return True
    return False


def screenshot(browser: Any, shots: Path, name: str) -> Image.Image:
    """The window as Chromium drew it, saved, after the checks every page passes: the
    viewport's size, the header's colour across its top, and more than a few colours (a
    blank or unstyled page has a handful)."""
    png = browser.get_screenshot_as_png()
    (shots / f"{name}.png").write_bytes(png)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert image.size == (width, height), shots / f"{name}.png"
    assert all(close(image.getpixel((x, 5)), HEADER_RGB) for x in range(0, width, 40)), \
        shots / f"{name}.png"
    assert len(image.getcolors(width * height)) > 20, shots / f"{name}.png"
    return image


def close(pixel: Any, rgb: tuple[int, int, int], tolerance: int = 6) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb, strict=True))


def confirm_pixels(image: Image.Image) -> int:
    return sum(count for count, pixel in image.getcolors(image.width * image.height)
               if close(pixel, CONFIRM_RGB))


def rows(browser: Any, table: str) -> list[list[str]]:
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")]


def test_pages_render_with_the_cluster_contents(browser, cluster, shots):
    topic, group = cluster["topic"], cluster["group"]
    open_page(browser, cluster, "/")
    screenshot(browser, shots, "overview")
    header = browser.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == "rgba(31, 58, 95, 1)"
    assert rows(browser, "brokers") == [["0", "127.0.0.1", str(cluster["broker"].port),
                                         "controller"]]

    open_page(browser, cluster, "/topics")
    screenshot(browser, shots, "topics")
    assert [topic, "2", "1", "0", str(RECORDS)] in [r[:5] for r in rows(browser, "topics")]
    follow(browser, browser.find_element(By.LINK_TEXT, topic))
    screenshot(browser, shots, "topic")
    assert browser.title.startswith(f"Topic {topic}")
    assert [r[:7] for r in rows(browser, "partitions")] == [
        ["0", "0", "0", "0", "0", str(RECORDS), str(RECORDS)],
        ["1", "0", "0", "0", "0", "0", "0"]]

    follow(browser, browser.find_elements(By.LINK_TEXT, "browse")[0])
    screenshot(browser, shots, "records")
    records = rows(browser, "records")
    assert [r[0] for r in records] == [str(i) for i in range(RECORDS)]
    assert records[1][2] == "customer-1"
    assert records[1][3] == '{\n  "amount": 10\n}'
    assert records[1][4] == "source: test"
    Select(browser.find_element(By.NAME, "format")).select_by_value("hex")
    offset = browser.find_element(By.NAME, "offset")
    offset.send_keys("4")
    follow(browser, offset)
    assert [r[3] for r in rows(browser, "records")] == [b'{"amount": 40}'.hex(" ")]

    open_page(browser, cluster, "/groups")
    screenshot(browser, shots, "groups")
    follow(browser, browser.find_element(By.LINK_TEXT, group))
    screenshot(browser, shots, "group")
    assert rows(browser, "lag") == [[topic, "0", str(COMMITTED), str(RECORDS),
                                     str(RECORDS - COMMITTED), "-", "-", "-"]]


def test_creating_a_topic_waits_for_its_confirmation(browser, cluster, shots):
    name = unique("from-browser")

    def fill_and_submit() -> None:
        open_page(browser, cluster, "/topics")
        form = browser.find_element(By.ID, "create-topic")
        form.find_element(By.NAME, "name").send_keys(name)
        partitions = form.find_element(By.NAME, "partitions")
        partitions.clear()
        partitions.send_keys("3")
        follow(browser, form.find_element(By.TAG_NAME, "button"))

    def exists() -> bool:
        return name in admin(cluster["broker"].bootstrap).list_topics(timeout=TIMEOUT).topics

    open_page(browser, cluster, "/topics")
    assert confirm_pixels(screenshot(browser, shots, "before-create")) == 0
    fill_and_submit()
    asked = screenshot(browser, shots, "confirm-create")
    assert confirm_pixels(asked) > 500  # the red-bordered box and its Confirm button
    assert f"Create topic {name} with 3 partitions" in \
        browser.find_element(By.ID, "confirm").text
    assert not exists()
    follow(browser, browser.find_element(By.LINK_TEXT, "Cancel"))
    assert browser.title.startswith("Topics") and not exists()

    fill_and_submit()
    follow(browser, browser.find_element(By.ID, "confirm-button"))
    done = screenshot(browser, shots, "created")
    assert confirm_pixels(done) == 0
    assert browser.find_element(By.CSS_SELECTOR, ".message.ok").text == \
        f"Topic {name} created."
    assert exists()
    open_page(browser, cluster, "/topic", name=name)
    assert [r[0] for r in rows(browser, "partitions")] == ["0", "1", "2"]


def test_resetting_offsets_shows_the_plan_then_commits_it(browser, cluster, shots):
    topic, group = cluster["topic"], cluster["group"]

    open_page(browser, cluster, "/group", id=group)
    form = browser.find_element(By.ID, "reset-offsets")
    Select(form.find_element(By.NAME, "to")).select_by_value("earliest")
    follow(browser, form.find_element(By.TAG_NAME, "button"))
    screenshot(browser, shots, "confirm-reset")
    assert rows(browser, "plan") == [[topic, "0", str(COMMITTED), "0"], [topic, "1", "-", "0"]]
    assert committed_offsets(cluster["broker"].bootstrap, group) == {0: COMMITTED}
    follow(browser, browser.find_element(By.ID, "confirm-button"))
    screenshot(browser, shots, "reset")
    assert committed_offsets(cluster["broker"].bootstrap, group) == {0: 0, 1: 0}
    follow(browser, browser.find_element(By.LINK_TEXT, "Back"))
    assert [r[:5] for r in rows(browser, "lag")] == [
        [topic, "0", "0", str(RECORDS), str(RECORDS)], [topic, "1", "0", "0", "0"]]


def test_a_form_on_another_origin_is_refused_even_with_the_token(browser, cluster, shots):
    name = unique("cross-site")
    open_page(browser, cluster, "/topics")
    token = browser.find_element(By.NAME, "csrf").get_attribute("value")
    forged = (f'<form method="post" action="{cluster["url"]}/topics/create">'
              f'<input name="csrf" value="{token}"><input name="name" value="{name}">'
              '<input name="confirmed" value="yes"><button id="go">go</button></form>')
    browser.get("data:text/html," + urllib.parse.quote(forged))
    follow(browser, browser.find_element(By.ID, "go"))
    screenshot(browser, shots, "refused")
    assert browser.title.startswith("Refused")
    assert "another site" in browser.find_element(By.CSS_SELECTOR, ".message.error").text
    assert name not in admin(cluster["broker"].bootstrap).list_topics(timeout=TIMEOUT).topics
