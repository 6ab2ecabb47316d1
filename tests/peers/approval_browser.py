"""Drives the approval pages and the console's Approvals page in Debian's
headless Chromium through Selenium (chromium-driver), as people would.
tests/approvals.rs starts a real gateway, a real tool server and a real
OpenID provider, holds three calls, then runs this script with their links;
it prints one JSON object of what it saw and exits non-zero on the first
thing that is wrong.

People: alice signs in through her own approval link and clicks Approve;
bob, signed in as himself in his own browser, opens alice's other link and
must see nothing of her call; an operator approves the third call (an
`approver = "admin"` rule, whose arguments carry markup) on the console.
"""

import argparse
import json
import sys

from selenium.webdriver.common.by import By

from console_browser import Failed, accept, browser, check, text_present, through_provider, type_token


def sign_in_to(driver, link, user, gateway):
    """Opens `link`, signing in at the provider as `user` (its login and
    consent forms), until a gateway page."""
    def arrived(d):
        return d.current_url.startswith(gateway) and not d.find_elements(By.CSS_SELECTOR, "input[name=prompt]")

    return through_provider(driver, link, user, arrived, "a gateway page")


def main():
    parser = argparse.ArgumentParser()
    for name in ("admin", "gateway", "alice_link", "alice_other_link", "admin_token", "chromium", "chromedriver"):
        parser.add_argument("--" + name.replace("_", "-"), required=True)
    parser.add_argument("--screenshots", default=None)
    args = parser.parse_args()
    gateway = args.gateway.rstrip("/")
    seen = {}
    alice, bob, operator = browser(args), browser(args), browser(args)
    try:
        # Alice: her call, its arguments as text, and her Approve button.
        sign_in_to(alice, args.alice_link, "alice", gateway)
        text_present(alice, "#tool", "Repo.Delete@1.0.0", "alice's approval page")
        seen["alice_page"] = alice.find_element(By.TAG_NAME, "body").text
        alice.find_element(By.ID, "approve").click()
        text_present(alice, "h1", "Approved", "the approval")
        seen["alice_approved"] = alice.find_element(By.TAG_NAME, "body").text

        # Bob, signed in as himself, opens alice's other link.
        seen["bob_page"] = sign_in_to(bob, args.alice_other_link, "bob", gateway)
        check(not bob.find_elements(By.ID, "approve"), "bob got an Approve button")

        # The operator: the console's Approvals page, the token, Approve.
        admin = args.admin.rstrip("/")
        operator.get(f"{admin}/#approvals")
        type_token(operator, args.admin_token)
        text_present(operator, "section.approval h2", "Repo.Wipe@1.0.0", "the held call on the console")
        seen["console"] = operator.find_element(By.ID, "page").text
        button = operator.find_element(By.CSS_SELECTOR, "section.approval button.approve")
        button.click()
        seen["confirm"] = accept(operator)
        text_present(operator, "#approval-result", "approved", "the operator's approval")
        seen["console_result"] = operator.find_element(By.ID, "approval-result").text
        seen["title"] = operator.title
        check(operator.title != "pwned", "the held call's arguments ran as markup")
    except Failed as failure:
        print(json.dumps(seen, indent=1))
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    finally:
        for driver in (alice, bob, operator):
            driver.quit()
    print(json.dumps(seen, indent=1))


if __name__ == "__main__":
    main()
