"""Take docs/images/mlflow-study.png: the MLflow UI showing a study hpsearch logged, in headless
Chromium. Run a tracked search first (docs/tracking.md), then:

    python docs/images/mlflow_screenshot.py http://127.0.0.1:5000 EXPERIMENT_ID

It opens the experiment's runs as charts, with the study's parent run and its trial runs nested
under it, and the validation metrics' charts over samples seen. Chromium and chromedriver are
Debian's packages (`make browser`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

HERE = Path(__file__).resolve().parent


def main() -> None:
    uri, experiment = sys.argv[1].rstrip("/"), sys.argv[2]
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1600,1000",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))
        try:
            # The experiment's runs as charts: the study's parent run, its trial runs nested under it.
            driver.get(f"{uri}/#/experiments/{experiment}/runs?compareRunsMode=CHART")
            time.sleep(8)
            for close in driver.find_elements(By.XPATH, "//button[@aria-label='Close']"):  # the assistant's panel
                close.click()
            expand = driver.find_elements(By.XPATH, "//*[contains(@class,'ag-cell')]//button")
            if expand:
                expand[0].click()  # the parent's trial runs
            time.sleep(2)
            search = driver.find_element(By.XPATH, "//input[@placeholder='Search metric charts']")
            search.send_keys("val_")
            time.sleep(5)
            out = HERE / "mlflow-study.png"
            driver.save_screenshot(str(out))
            print(f"wrote {out}")
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
