"""Drives the operator console and the user's page in Debian's headless
Chromium through Selenium (chromium-driver), as a person would: typing into
forms, clicking buttons, answering confirmation dialogs. tests/console.rs
starts a real gateway, a real tool server and a real OpenID provider, then
runs this script with the URLs; it prints one JSON object of what it saw
and exits non-zero on the first thing that is wrong.

People: alice and bob connect the provider through their own challenge
links, each in a browser of their own (separate profiles); an operator
uses the console in a third: refused without the admin token and with a
wrong one, everything with the right one.
"""

import argparse
import json
import os
import sys
import tempfile
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 20


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


def browser(args):
    options = webdriver.ChromeOptions()
    options.binary_location = args.chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-extensions", "--window-size=1280,800", "--hide-scrollbars",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='otc-console-profile-')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=args.chromedriver), options=options)


def wait_for(driver, condition, what):
    try:
        # A page that is being replaced (a form posted) leaves elements
        # stale, or not there yet: asked again, not failed.
        ignored = (NoSuchElementException, StaleElementReferenceException)
        return WebDriverWait(driver, WAIT, ignored_exceptions=ignored).until(condition)
    except TimeoutException:
        raise Failed(f"timed out waiting for {what} at {driver.current_url}:\n{driver.page_source[:3000]}")


def text_present(driver, css, text, what):
    wait_for(driver, ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text), what)


def screenshot(driver, args, name):
    if args.screenshots:
        driver.save_screenshot(os.path.join(args.screenshots, f"{name}.png"))


def through_provider(driver, link, user, arrived, what):
    """Opens `link` and answers the provider's forms as `user` (its login
    and consent forms) until `arrived(driver)`; returns that page's text."""
    driver.get(link)
    for _ in range(12):
        wait_for(driver, lambda d: d.execute_script("return document.readyState") == "complete", "a page")
        if arrived(driver):
            return driver.find_element(By.TAG_NAME, "body").text
        prompts = driver.find_elements(By.CSS_SELECTOR, "input[name=prompt]")
        check(prompts, f"{user}: neither a provider form nor {what} at {driver.current_url}:\n"
              f"{driver.page_source[:2000]}")
        form = prompts[0].find_element(By.XPATH, "./ancestor::form")
        if prompts[0].get_attribute("value") == "login":
            form.find_element(By.NAME, "login").send_keys(user)
            form.find_element(By.NAME, "password").send_keys("any")
        form.find_element(By.CSS_SELECTOR, "button[type=submit], button:not([type])").click()
        # Login and consent can share a URL: wait for the form itself to go.
        wait_for(driver, lambda d: gone(form), "the form to be sent")
    raise Failed(f"{user}: never reached {what}; at {driver.current_url}")


def connect(driver, link, user, gateway):
    """Opens a challenge link, signs in to the gateway and consents at the
    provider as `user`, until the gateway's "Connected" page."""
    through_provider(driver, link, user,
                     lambda d: d.current_url.startswith(gateway) and "Connected" in d.page_source,
                     "the Connected page")


def gone(element):
    """Whether the page holding `element` was replaced (Chromium answers
    either "stale" or "not in the document" then)."""
    try:
        element.is_enabled()
        return False
    except WebDriverException:
        return True


def console_errors(driver):
    """What the page logged, but the report of the console's own blocked
    inline self-test script (proof the Content-Security-Policy holds)."""
    entries = driver.get_log("browser")
    blocked = [e for e in entries if "inline script" in e["message"] and "violates" in e["message"]]
    return blocked, [e["message"] for e in entries if e not in blocked]


def same_origin_only(driver, origin):
    urls = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".concat(performance.getEntriesByType('navigation').map(e => e.name))")
    foreign = [u for u in urls if not u.startswith(origin + "/")]
    check(not foreign, f"loaded from another origin: {foreign}")
    return len(urls)


def accept(driver):
    wait_for(driver, ec.alert_is_present(), "the confirmation dialog")
    alert = driver.switch_to.alert
    message = alert.text
    alert.accept()
    return message


def type_token(driver, token):
    """Types over the admin token box and presses Enter (one change event:
    the page renders again with actions enabled)."""
    box = driver.find_element(By.ID, "admin-token")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(token + Keys.ENTER)
    wait_for(driver, lambda d: d.execute_script("return sessionStorage.getItem('otc-admin-token')") == token,
             "the token to be taken")


def console_page(driver, admin, hash_, marker_css, marker, args, shot):
    driver.get(f"{admin}/{hash_}")
    text_present(driver, marker_css, marker, f"{hash_}: {marker!r}")
    page = hash_.split("?")[0].lstrip("#")
    wait_for(driver, lambda d: d.find_element(By.ID, "page").get_attribute("data-page") == page, f"{hash_} rendered")
    if shot:
        screenshot(driver, args, page)


def refused_only(errors, what):
    """What a page logged when its reads were refused: the browser's own
    line for each 401, nothing else."""
    check(all("401" in e for e in errors), f"{what} logged {errors}")


def operator(args, seen):
    admin = args.admin.rstrip("/")
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(admin))
    driver = browser(args)
    try:
        # Without the admin token the console loads, asks for it, and shows
        # nothing of the gateway.
        driver.get(f"{admin}/#overview")
        text_present(driver, "#refused", "401", "the refusal without a token")
        page = driver.find_element(By.ID, "page").text
        check("Type the admin token above" in page, f"no request for the token:\n{page}")
        check("config generation" not in page and "Calc.Add" not in page, f"read without a token:\n{page}")
        seen["without_token"] = page
        screenshot(driver, args, "token")
        blocked, errors = console_errors(driver)
        refused_only(errors, "the console without a token")
        # (The CSP's report of the inline self-test: once per page load.)
        reported = bool(blocked)

        type_token(driver, args.admin_token)
        pages = [
            ("#overview", "#page", "config generation"),
            ("#upstreams", "#page", "org"),
            ("#catalog", "#page", "Mail.Read@1.0.0"),
            ("#calls", "#page", "Calc.Add@1.0.0"),
            ("#actions", "#page", "Each action asks for confirmation first."),
        ]
        loaded = 0
        for hash_, css, marker in pages:
            console_page(driver, admin, hash_, css, marker, args, True)
            blocked, errors = console_errors(driver)
            reported = reported or bool(blocked)
            check(not errors, f"{hash_}: the page logged {errors}")
            check(driver.find_element(By.ID, "csp-warning").get_attribute("hidden") is not None,
                  f"{hash_}: an inline script ran")
            loaded += same_origin_only(driver, origin)
        check(reported, "no report of the blocked inline script: the CSP is not enforced")
        seen["resources_checked"] = loaded
        check(driver.find_element(By.ID, "reload").get_attribute("disabled") is None, "reload disabled with the token")

        # Explain: the form, typed into and sent; the answer names the rule
        # that hid the tool.
        driver.get(f"{admin}/#explain")
        form = wait_for(driver, ec.presence_of_element_located((By.ID, "explain-form")), "the explain form")
        form.find_element(By.NAME, "user_id").send_keys("alice")
        form.find_element(By.NAME, "tool").send_keys("Mail_Send")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        text_present(driver, "#page", 'denied by policy "mail-team" (pattern "Mail.Send")', "the hiding rule")
        text_present(driver, "#resolution", "hidden from this caller by policy", "the resolution")
        seen["explain"] = driver.find_element(By.ID, "page").text
        screenshot(driver, args, "explain")
        _, errors = console_errors(driver)
        check(not errors, f"explain logged {errors}")

        # Grants: both users listed, scopes and when, no token.
        console_page(driver, admin, "#grants", "#grants-of-idp", "bob", args, False)
        rows = driver.find_elements(By.CSS_SELECTOR, "#grants-of-idp tr[data-user]")
        seen["grants"] = [r.text for r in rows]
        check([r.get_attribute("data-user") for r in rows] == ["alice", "bob"], f"grants listed: {seen['grants']}")
        check(all("mail.read" in r.text for r in rows), f"scopes: {seen['grants']}")
        check(all(b.get_attribute("disabled") is None for b in driver.find_elements(By.CSS_SELECTOR, "button.revoke")),
              "revoke disabled with the token")
        screenshot(driver, args, "grants")

        # A wrong admin token: the page is refused, and lists nobody.
        type_token(driver, "not-the-admin-token")
        text_present(driver, "#refused", "401", "the refusal of a wrong token")
        seen["refused"] = driver.find_element(By.ID, "refused").text
        page = driver.find_element(By.ID, "page").text
        check("bob" not in page and "alice" not in page, f"a wrong token listed grants:\n{page}")
        check("not this gateway's" in page, f"the page did not say the token is wrong:\n{page}")
        _, errors = console_errors(driver)
        refused_only(errors, "the grants page with a wrong token")

        # The right one: listed again, and bob's grant revoked, confirmed.
        type_token(driver, args.admin_token)
        bob_revoke = wait_for(driver, ec.element_to_be_clickable(
            (By.CSS_SELECTOR, "#grants-of-idp tr[data-user=bob] button.revoke")), "an enabled revoke button")
        bob_revoke.click()
        seen["confirm"] = accept(driver)
        text_present(driver, "#grant-result", "Revoked bob's grant at idp.", "the revocation")
        seen["revoked"] = driver.find_element(By.ID, "grant-result").text

        # Changes: a tool server rewrote Calc.Add's description with markup
        # aimed at the page and at the model. It is shown as text, side by
        # side with the approved one, and nothing of it runs; then approved.
        console_page(driver, admin, "#changes", "#page", "Calc.Add@1.0.0", args, True)
        page = driver.find_element(By.ID, "page")
        check("<img src=x onerror=" in page.text, f"the markup is not shown as text:\n{page.text}")
        check("<IMPORTANT>" in page.text and "model_markup" in page.text, f"the findings:\n{page.text}")
        check(not page.find_elements(By.CSS_SELECTOR, "img, script:not([src]), important"),
              "the description's markup became elements")
        check(driver.title != "pwned", "the description's script ran")
        check(page.find_elements(By.CSS_SELECTOR, "table.diff tr.added"), "no line marked as proposed")
        seen["changes"] = page.text
        _, errors = console_errors(driver)
        check(not errors, f"changes logged {errors}")
        approve = wait_for(driver, ec.element_to_be_clickable((By.CSS_SELECTOR, "button.approve")), "the approve button")
        approve.click()
        seen["approve_confirm"] = accept(driver)
        text_present(driver, "#change-result", "approved", "the approval")
        seen["approved"] = driver.find_element(By.ID, "change-result").text

        # Reload, confirmed, with the token.
        driver.get(f"{admin}/#actions")
        reload = wait_for(driver, ec.element_to_be_clickable((By.ID, "reload")), "the reload button")
        reload.click()
        accept(driver)
        text_present(driver, "#action-result", "Reloaded: generation 2", "the reload")
        screenshot(driver, args, "actions")
        _, errors = console_errors(driver)
        check(not errors, f"actions logged {errors}")
    finally:
        driver.quit()


def user_page(driver, gateway, user, args, shot):
    driver.get(f"{gateway}/oauth/")
    text_present(driver, "#user", user, f"{user}'s connections page")
    return driver.find_element(By.TAG_NAME, "body").text


def main():
    parser = argparse.ArgumentParser()
    for name in ("admin", "gateway", "alice_link", "bob_link", "admin_token", "chromium", "chromedriver"):
        parser.add_argument("--" + name.replace("_", "-"), required=True)
    parser.add_argument("--screenshots", default=os.environ.get("OTC_CONSOLE_SCREENSHOTS"))
    args = parser.parse_args()
    gateway = args.gateway.rstrip("/")
    seen = {}
    alice = browser(args)
    bob = browser(args)
    try:
        connect(alice, args.alice_link, "alice", gateway)
        connect(bob, args.bob_link, "bob", gateway)
        page = user_page(alice, gateway, "alice", args, True)
        check("connected" in page and "mail.read" in page and "UTC" in page, f"alice's page:\n{page}")
        check("bob" not in page, f"alice sees bob:\n{page}")
        seen["alice_page"] = page
        screenshot(alice, args, "connections")

        operator(args, seen)

        # Alice disconnects through her page's button (a POST with its CSRF
        # token), and lands back on her page, not connected.
        alice.find_element(By.CSS_SELECTOR, "tr[data-provider=idp] button[type=submit]").click()
        wait_for(alice, lambda d: "not connected" in d.find_element(By.TAG_NAME, "body").text, "alice disconnected")
        seen["alice_after"] = alice.find_element(By.TAG_NAME, "body").text
        check(not alice.find_elements(By.CSS_SELECTOR, "tr[data-provider=idp] button"), "a disconnect button remains")
        # Bob's grant was revoked by the operator: his page says so too.
        seen["bob_after"] = user_page(bob, gateway, "bob", args, False)
        check("not connected" in seen["bob_after"], f"bob's page:\n{seen['bob_after']}")
        for who, driver in (("alice", alice), ("bob", bob)):
            _, errors = console_errors(driver)
            gateway_errors = [e for e in errors if gateway in e]
            check(not gateway_errors, f"{who}'s gateway pages logged {gateway_errors}")
    except Failed as failure:
        print(json.dumps(seen, indent=1))
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    finally:
        alice.quit()
        bob.quit()
    print(json.dumps(seen, indent=1))


if __name__ == "__main__":
    main()
