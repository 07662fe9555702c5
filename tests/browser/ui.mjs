// Drives sluice's /ui in headless Chromium: loads the page, checks the rules tree and the
// live figures, explains a request, checks that no Content-Security-Policy violation or
// script error happened, and takes a screenshot.
// Usage: node ui.mjs <http base URL> <screenshot.png> <domain> <descriptor>
import { chromium } from "playwright-core";

const [base, screenshot, domain, descriptor] = process.argv.slice(2);
const fail = (message) => { console.error("FAIL: " + message); process.exitCode = 1; };

const browser = await chromium.launch({
  executablePath: process.env.SLUICE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("requestfailed", (r) => problems.push("request failed: " + r.url()));
  page.on("request", (r) => { if (!r.url().startsWith(base)) problems.push("external request: " + r.url()); });

  const response = await page.goto(base + "/ui", { waitUntil: "networkidle" });
  if (response.status() !== 200) fail("GET /ui: " + response.status());
  await page.waitForSelector(`details.domain[data-domain="${domain}"] li.node`, { timeout: 20000 });
  const summary = await page.textContent("#summary");
  if (!summary.includes("domain")) fail("summary: " + summary);
  const nodes = await page.locator("#rules li.node").count();
  console.log("rules tree nodes:", nodes);
  if (nodes < 2) fail("the rules tree shows " + nodes + " nodes");

  await page.fill("#domain", domain);
  await page.fill("#descriptors", descriptor);
  await page.click("#explain-button");
  await page.waitForSelector("#explanation .explained", { timeout: 20000 });
  const explained = await page.textContent("#explanation");
  console.log("explanation:", explained.replace(/\s+/g, " ").slice(0, 400));
  if (!explained.includes("would be refused")) fail("the explained key is exhausted but the page says: " + explained);
  if (!explained.includes("exhausted; a call is admitted again in")) fail("no retry time shown");
  if (!explained.includes("Where envoyproxy/ratelimit would differ")) fail("no upstream difference shown");

  await page.waitForFunction(() => document.querySelectorAll("#top tbody td.mono").length > 0, null, { timeout: 20000 });
  const top = await page.textContent("#top tbody");
  console.log("keys limited most:", top.replace(/\s+/g, " "));
  if (!top.includes(descriptor.split(",")[0])) fail("the refused key is not among the keys limited most: " + top);
  await page.waitForFunction(() => document.querySelectorAll("#sparkline polyline").length === 2, null, { timeout: 20000 });

  await page.screenshot({ path: screenshot, fullPage: true });
  if (problems.length) fail(problems.join("\n"));
} finally {
  await browser.close();
}
