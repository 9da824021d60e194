// Browser tests of the web console against the real orion binary.
//
//   cd test/console && npm ci && npm test      (or `make test-console`)
//
// Each suite starts its own processes (harness.mjs) and one headless
// Chromium; screenshots go to test/artifacts/console/ (gitignored).
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import os from "node:os";
import { Orion, REPO, browser, hasFlag, shot, sleep, waitFor } from "./harness.mjs";

// ---- page helpers -----------------------------------------------------------

/** Errors the page logged, less the ones that are expected. */
function unexpected(errors) {
  return errors.filter(
    (e) =>
      // A server without demo controls answers /api/v1/demo/status with a
      // 404: that is how the page learns it has no demo mode.
      !/api\/v1\/demo\/status/.test(e) &&
      // A 404 resource error without URL comes from that same probe.
      !/^console: Failed to load resource: the server responded with a status of 404/.test(e),
  );
}

/**
 * Prints the tails of the suite's process logs after a test that failed:
 * CI keeps only the test output, and the logs say who led and which worker
 * was connected where.
 */
function logsOnFailure(orion) {
  afterEach((t) => {
    if (!t.passed) console.error(`processes after "${t.name}" failed:\n${orion.logs(60)}`);
  });
}

async function open(page, url) {
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await page.waitForSelector('[data-template="chain"]');
  await waitFor("the first DAG list", async () => (await page.textContent("#dag-count")) !== null);
}

/** Picks a template and submits it; returns the new DAG's id. */
async function submitTemplate(page, key) {
  await page.click(`[data-template="${key}"]`);
  await page.click('[data-testid="submit"]');
  const msg = page.locator('[data-testid="submit-msg"]');
  await waitFor(`submission of ${key}`, async () => /Submitted: /.test((await msg.textContent()) ?? ""), 35000);
  return ((await msg.textContent()) ?? "").replace(/^.*Submitted: /, "").trim();
}

/** Pastes a DAG into the editor and submits it; returns its id. */
async function submitText(page, text) {
  await page.fill('[data-testid="dag-text"]', text);
  await page.click('[data-testid="submit"]');
  const msg = page.locator('[data-testid="submit-msg"]');
  await waitFor("the submission", async () => /Submitted: /.test((await msg.textContent()) ?? ""), 35000);
  return ((await msg.textContent()) ?? "").replace(/^.*Submitted: /, "").trim();
}

/** Clicks Delete and answers its confirmation (accept or not); returns the question asked. */
async function clickDelete(page, accept) {
  let asked = null;
  page.once("dialog", (d) => {
    asked = { type: d.type(), message: d.message() };
    void (accept ? d.accept() : d.dismiss());
  });
  await page.click('[data-testid="delete"]');
  await waitFor("the confirmation", async () => asked, 5000);
  return asked;
}

/**
 * Stops the page's event stream, so that it does not hear of what the test
 * does next (as a page that has not heard yet of another client's change),
 * and resume() starts it again. With the stream stopped but not down the
 * page does not poll either.
 */
async function pauseStream(page) {
  await page.evaluate(() => window.orion.stream.stop());
  return {
    resume: async () => {
      await page.evaluate(() => window.orion.stream.start(window.orion.stream.lastRev));
      await waitFor("the live stream again", async () => /live/.test((await page.textContent('[data-testid="conn"]')) ?? ""), 15000);
    },
  };
}

/** Statuses of the graph's nodes, from Cytoscape itself. */
async function nodeStatuses(page) {
  return page.evaluate(() => {
    const cy = window.orion.graph.cy;
    const out = {};
    cy.nodes().forEach((n) => (out[n.id()] = n.data("status")));
    return out;
  });
}

async function waitDAG(page, id, status, timeoutMs) {
  await waitFor(
    `DAG ${id} ${status} in the page`,
    async () => (await page.getAttribute("#graph", "data-dag")) === id && (await page.getAttribute("#graph", "data-status")) === status,
    timeoutMs,
    200,
  );
}

async function waitAllNodes(page, status, count, timeoutMs) {
  return waitFor(
    `${count} nodes ${status}`,
    async () => {
      const st = await nodeStatuses(page);
      const vals = Object.values(st);
      return vals.length === count && vals.every((s) => s === status) ? st : null;
    },
    timeoutMs,
    200,
  );
}

async function waitLayout(page, nodes) {
  await waitFor(`the layout of ${nodes} nodes`, async () => {
    const g = await page.$("#graph");
    return (await g.getAttribute("data-layout")) === "done" && (await g.getAttribute("data-nodes")) === String(nodes);
  }, 30000);
}

/** Clicks a task's node where Cytoscape drew it. */
async function clickNode(page, id) {
  const pos = await page.evaluate((id) => {
    const n = window.orion.graph.cy.getElementById(id);
    return n.empty() ? null : n.renderedPosition();
  }, id);
  assert.ok(pos, `no node ${id}`);
  const box = await page.locator("#graph").boundingBox();
  await page.mouse.click(box.x + pos.x, box.y + pos.y);
  await waitFor(`the task panel of ${id}`, async () => (await page.textContent('[data-testid="task-id"]').catch(() => "")) === id);
}

async function api(base, path, init) {
  const r = await fetch(base + path, init);
  return { status: r.status, body: await r.json().catch(() => null) };
}

// ---- single node -----------------------------------------------------------

// The demo controls need `orion server --demo` (and its /api/v1/demo routes):
// the demo tests skip themselves on a build without the flag.
async function demoFlag(orion) {
  return hasFlag(await orion.bin(), "server", "demo");
}

async function narration(page) {
  return (await page.textContent('[data-testid="narration"]')) ?? "";
}

describe("console on a single node", { timeout: 480000 }, () => {
  const orion = new Orion("single");
  logsOnFailure(orion);
  let node, b, page, demo;

  before(async () => {
    demo = await demoFlag(orion);
    node = await orion.node({ name: "n1", slots: 4, extra: demo ? ["--demo"] : [] });
    const r = await fetch(node.pageURL + "/");
    const html = await r.text();
    assert.equal(r.status, 200, `GET / on the server: ${r.status}: the console is not mounted at / (wire console.Handler() in internal/http/api, or set ORION_CONSOLE_PROXY_BIN)`);
    assert.match(html, /Orion console/, "GET / does not serve the built console (run `make console` before building orion)");
    b = await browser();
    page = b.page;
    await open(page, node.pageURL);
  });

  after(async (t) => {
    if (b && unexpected(b.errors).length) console.error("page errors:\n" + unexpected(b.errors).join("\n"));
    await b?.close();
    await orion.stop();
  });

  test("the server serves the OpenAPI document the console's types were generated from", async () => {
    // src/api.gen.ts is generated from internal/http/openapi/openapi.json
    // (make test checks it is up to date): the page must get that document.
    const served = await page.evaluate(async () => {
      const r = await fetch("/api/v1/openapi.json");
      return { status: r.status, type: r.headers.get("Content-Type"), text: await r.text() };
    });
    assert.equal(served.status, 200);
    assert.match(served.type ?? "", /application\/json/);
    const doc = JSON.parse(served.text);
    assert.equal(doc.openapi, "3.1.0");
    assert.deepEqual(doc, JSON.parse(readFileSync(join(REPO, "internal/http/openapi/openapi.json"), "utf8")));
  });

  test("a template runs live: every node succeeds, a task shows its output tail and log", async () => {
    // The page follows the event stream (SSE), not polls.
    await waitFor("the live stream", async () => /live/.test((await page.textContent('[data-testid="conn"]')) ?? ""), 15000);
    const id = await submitTemplate(page, "diamond");
    await waitLayout(page, 4);
    await waitAllNodes(page, "succeeded", 4, 30000);
    await waitDAG(page, id, "succeeded", 10000);
    await clickNode(page, "left");
    const tail = await page.textContent('[data-testid="output-tail"]');
    assert.match(tail, /left branch: parse/);
    assert.match(tail, /parsed 42/);
    const facts = await page.textContent("#task-body");
    assert.match(facts, /exit code\s*0/);
    assert.match(facts, /attempts\s*1/);
    const href = await page.getAttribute('[data-testid="log-link"]', "href");
    const log = await (await fetch(node.pageURL + href)).text();
    assert.match(log, /parsed 42/);
    await shot(page, "diamond-succeeded");
    await page.click("#tab-timeline");
    await page.waitForSelector("#timeline svg.gantt");
    assert.equal(await page.locator("#timeline svg .row").count(), 4);
    await shot(page, "diamond-timeline");
    await page.click("#tab-graph");
  });

  test("the failure cascade: retries, a failure for good, upstream_failed, then retry", async () => {
    const id = await submitTemplate(page, "cascade");
    await waitLayout(page, 8);
    await waitDAG(page, id, "failed", 60000);
    const st = await waitFor("final statuses", async () => {
      const s = await nodeStatuses(page);
      return s["load-db"] === "failed" && s.notify === "upstream_failed" ? s : null;
    }, 10000);
    assert.equal(st.extract, "succeeded");
    assert.equal(st["flaky-api"], "succeeded");
    assert.equal(st.archive, "succeeded");
    for (const t of ["build-index", "refresh-views", "publish", "notify"]) assert.equal(st[t], "upstream_failed", t);
    await clickNode(page, "flaky-api");
    assert.match(await page.textContent("#task-body"), /attempts\s*2/);
    assert.match(await page.textContent("#task-body"), /Earlier attempts/);
    await clickNode(page, "publish");
    assert.match(await page.textContent("#task-body"), /because load-db failed/);
    await waitFor("the narration of the failure and its cascade", async () => {
      const n = (await page.textContent('[data-testid="narration"]')) ?? "";
      return /load-db failed for good/.test(n) && /cascade from load-db: 4 task/.test(n) && /flaky-api attempt 1 failed/.test(n);
    }, 10000);
    await shot(page, "cascade-failed");
    await page.click("#tab-timeline");
    await page.waitForSelector("#timeline svg.gantt");
    await shot(page, "cascade-timeline");
    await page.click("#tab-graph");

    // Retry: a new run; load-db fails again, so the DAG fails again.
    assert.equal(await page.isEnabled('[data-testid="retry"]'), true);
    await page.click('[data-testid="retry"]');
    await waitFor("run 2", async () => /run 2/.test((await page.textContent("#dag-meta")) ?? ""), 20000);
    await waitDAG(page, id, "failed", 60000);
  });

  test("trigger rules and handlers: an optional step, a rollback, a cleanup, a skipped page, handlers", async () => {
    const id = await submitTemplate(page, "release");
    await waitLayout(page, 9);
    await waitDAG(page, id, "failed", 60000);
    const st = await waitFor("final statuses", async () => {
      const s = await nodeStatuses(page);
      return s.on_exit === "succeeded" && s.on_failure === "succeeded" ? s : null;
    }, 20000);
    assert.deepEqual(st, {
      build: "succeeded", lint: "failed", deploy: "succeeded", smoke: "failed", rollback: "succeeded",
      cleanup: "succeeded", "page-oncall": "skipped", on_failure: "succeeded", on_exit: "succeeded",
    });
    await clickNode(page, "rollback");
    assert.match(await page.textContent('[data-testid="task-rule"]'), /one_failed/);
    assert.match(await page.textContent('[data-testid="task-when"]'), /tasks\.deploy\.status == "succeeded"/);
    await clickNode(page, "page-oncall");
    assert.match(await page.textContent('[data-testid="task-skipped"]'), /its dependencies ended in a way its rule does not run on/);
    await clickNode(page, "lint");
    assert.match(await page.textContent('[data-testid="task-rule"]'), /continue on failure/);
    await clickNode(page, "on_failure");
    assert.match(await page.textContent('[data-testid="task-rule"]'), /on_failure handler/);
    assert.match(await page.textContent('[data-testid="output-tail"]'), /release failed: lint,smoke/);
    await shot(page, "release-rules");
  });

  test("cancel a running DAG", async () => {
    const id = await submitTemplate(page, "chain");
    await waitFor("a running node", async () => Object.values(await nodeStatuses(page)).includes("running"), 20000);
    await page.click('[data-testid="cancel"]');
    await waitDAG(page, id, "cancelled", 20000);
    // The DAG's record is committed first, its tasks' in the next commit.
    const st = await waitFor("every unfinished task cancelled", async () => {
      const s = await nodeStatuses(page);
      return Object.values(s).every((x) => x === "cancelled" || x === "succeeded") ? s : null;
    }, 20000);
    assert.equal(st.announce, "cancelled");
  });

  test("delete: disabled while the DAG runs; once it has finished and it is confirmed, the DAG leaves the page, the list and the server", async () => {
    const gate = join(orion.dir, "delete-me.open");
    const id = await submitText(page, [
      "id: delete-me",
      "tasks:",
      `  - {id: hold, kind: shell, command: 'while [ ! -e "${gate}" ]; do sleep 0.05; done; echo released'}`,
      "  - {id: after, kind: shell, command: 'echo after', depends_on: [hold]}",
      "",
    ].join("\n"));
    assert.equal(id, "delete-me");
    // Running until the test opens the gate.
    await waitFor("hold running", async () => (await nodeStatuses(page)).hold === "running", 20000);
    await waitDAG(page, id, "running", 5000);
    assert.equal(await page.isEnabled('[data-testid="cancel"]'), true, "cancel is disabled on a running DAG");
    assert.equal(await page.isDisabled('[data-testid="delete"]'), true, "delete is enabled on a running DAG");
    writeFileSync(gate, "");
    await waitDAG(page, id, "succeeded", 30000);
    await waitFor("delete enabled", async () => page.isEnabled('[data-testid="delete"]'), 10000);
    assert.equal(await page.isDisabled('[data-testid="cancel"]'), true);

    await page.hover('[data-testid="delete"]');
    await waitFor("the delete help", async () => /retention/.test((await page.locator(".help-pop").textContent()) ?? ""), 5000);
    await page.mouse.move(5, 500);

    const deletes = [];
    const onRequest = (r) => {
      if (r.method() === "DELETE") deletes.push(r.url());
    };
    page.on("request", onRequest);
    try {
      // Not confirmed: nothing is sent, the DAG stays.
      const asked = await clickDelete(page, false);
      assert.equal(asked.type, "confirm");
      assert.match(asked.message, /delete-me/);
      assert.equal((await api(node.url, `/api/v1/dags/${id}`)).status, 200);
      assert.equal(await page.getAttribute("#graph", "data-dag"), id);

      // Confirmed: the page leaves it, the list drops it, the server has none.
      await clickDelete(page, true);
      await waitFor("the page to leave the deleted DAG", async () => (await page.textContent('[data-testid="dag-title"]')) === "No DAG selected", 15000);
      assert.equal(await page.locator(`#dag-list li[data-dag="${id}"]`).count(), 0, "the list still shows the deleted DAG");
      assert.equal(await page.evaluate(() => location.hash), "");
      assert.equal(await page.isDisabled('[data-testid="delete"]'), true);
      const gone = await api(node.url, `/api/v1/dags/${id}`);
      assert.equal(gone.status, 404, JSON.stringify(gone.body));
      assert.match(await narration(page), /deleted DAG delete-me with its 2 task/);
      // The list as the server has it now: still without it.
      await page.evaluate(() => window.orion.loadList());
      assert.equal(await page.locator(`#dag-list li[data-dag="${id}"]`).count(), 0, "a reloaded list shows the deleted DAG");
      assert.deepEqual(deletes, [node.pageURL + `/api/v1/dags/${id}`], "DELETE requests sent");
      await shot(page, "deleted");
    } finally {
      page.off("request", onRequest);
    }
  });

  test("delete refused by the server: its message is shown and the page stays; a DAG deleted meanwhile is left", async () => {
    const gate = join(orion.dir, "delete-refused.open");
    // Fails until the gate is open, then runs until cancelled.
    const id = await submitText(page, [
      "id: delete-refused",
      "tasks:",
      `  - {id: gate, kind: shell, max_retries: 0, command: 'if [ -e "${gate}" ]; then exec sleep 300; fi; echo "the gate is shut" >&2; exit 1'}`,
      "",
    ].join("\n"));
    await waitDAG(page, id, "failed", 30000);
    await waitFor("delete enabled", async () => page.isEnabled('[data-testid="delete"]'), 10000);

    // Another client retries it: it runs again, which the page has not heard.
    let stream = await pauseStream(page);
    writeFileSync(gate, "");
    const retried = await api(node.url, `/api/v1/dags/${id}/retry`, { method: "POST" });
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    assert.equal(await page.getAttribute("#graph", "data-status"), "failed");
    await clickDelete(page, true);
    await waitFor("the server's refusal in the page", async () => /delete failed: DAG delete-refused is running: cancel it before deleting it/.test(await narration(page)), 15000);
    // The page stays on the DAG and reloads it: running, so delete is off.
    await waitDAG(page, id, "running", 10000);
    assert.equal(await page.isDisabled('[data-testid="delete"]'), true);
    assert.equal(await page.textContent('[data-testid="dag-title"]'), id);
    await shot(page, "delete-refused");
    // The browser logs the 409 it was meant to get.
    const i = b.errors.findIndex((e) => /status of 409/.test(e));
    if (i >= 0) b.errors.splice(i, 1);
    await stream.resume();

    // Cancelled and stopped, then deleted by another client before the page
    // heard: the page's delete finds it gone (404) and leaves it.
    await page.click('[data-testid="cancel"]');
    await waitDAG(page, id, "cancelled", 20000);
    await waitAllNodes(page, "cancelled", 1, 20000);
    await waitFor("delete enabled", async () => page.isEnabled('[data-testid="delete"]'), 10000);
    stream = await pauseStream(page);
    const del = await api(node.url, `/api/v1/dags/${id}`, { method: "DELETE" });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    assert.deepEqual(del.body, { id, status: "deleted" });
    await clickDelete(page, true);
    await waitFor("the page to leave the DAG deleted meanwhile", async () => (await page.textContent('[data-testid="dag-title"]')) === "No DAG selected", 15000);
    assert.match(await narration(page), /DAG delete-refused was deleted already/);
    assert.equal(await page.locator(`#dag-list li[data-dag="${id}"]`).count(), 0);
    await stream.resume();
  });

  test("paste YAML and JSON; an invalid DAG shows the server's error", async () => {
    await page.fill('[data-testid="dag-text"]', readFileSync(join(REPO, "test/fixtures/etl.yaml"), "utf8"));
    await page.click('[data-testid="submit"]');
    await waitDAG(page, "etl-demo", "succeeded", 60000);
    assert.deepEqual(new Set(Object.values(await nodeStatuses(page))), new Set(["succeeded"]));

    await page.fill('[data-testid="dag-text"]', readFileSync(join(REPO, "test/fixtures/diamond.json"), "utf8"));
    await page.click('[data-testid="submit"]');
    await waitDAG(page, "diamond", "succeeded", 30000);

    await page.fill('[data-testid="dag-text"]', readFileSync(join(REPO, "test/fixtures/bad/cycle.yaml"), "utf8"));
    await page.click('[data-testid="submit"]');
    await waitFor("the validation error", async () => /400/.test((await page.textContent('[data-testid="submit-msg"]')) ?? ""), 10000);
    assert.match(await page.textContent('[data-testid="submit-msg"]'), /→/);
    await shot(page, "invalid-dag");
    // The browser logs the 400 it was meant to get.
    const i = b.errors.findIndex((e) => /status of 400/.test(e));
    if (i >= 0) b.errors.splice(i, 1);
  });

  test("a DAG's params and a task's outputs are shown", async () => {
    const text = [
      "id: with-outputs",
      "params:",
      "  region: eu",
      "  limit: 3",
      "tasks:",
      "  - id: produce",
      "    command: |",
      `      echo rows=42 >> "$ORION_OUTPUTS"`,
      `      echo region={{ params.region }} >> "$ORION_OUTPUTS"`,
      "  - id: consume",
      "    command: echo {{ tasks.produce.outputs.rows }}",
      "    depends_on: [produce]",
      "",
    ].join("\n");
    await page.fill('[data-testid="dag-text"]', text);
    await page.click('[data-testid="submit"]');
    await waitDAG(page, "with-outputs", "succeeded", 30000);
    await waitFor("the params", async () => /limit=3/.test((await page.textContent('[data-testid="dag-params"]')) ?? ""), 10000);
    assert.match(await page.textContent('[data-testid="dag-params"]'), /region=eu/);
    await clickNode(page, "produce");
    await waitFor("the outputs", async () => (await page.locator('[data-testid="task-outputs"]').count()) > 0, 10000);
    const outputs = await page.textContent('[data-testid="task-outputs"]');
    assert.match(outputs, /rows\s*42/);
    assert.match(outputs, /region\s*eu/);
    await clickNode(page, "consume");
    assert.match(await page.textContent('[data-testid="output-tail"]'), /^42/);
    await shot(page, "params-outputs");
  });

  test("a map group (for_each) opens onto its instances, a page at a time", async () => {
    const text = [
      "id: fan-out",
      "tasks:",
      "  - id: list",
      `    command: echo "parts=[$(seq -s, 0 59)]" > "$ORION_OUTPUTS"`,
      "  - id: process",
      '    for_each: "{{ tasks.list.outputs.parts }}"',
      "    kind: noop",
      "    depends_on: [list]",
      "",
    ].join("\n");
    await page.fill('[data-testid="dag-text"]', text);
    await page.click('[data-testid="submit"]');
    await waitDAG(page, "fan-out", "succeeded", 30000);
    await clickNode(page, "process");
    await waitFor("the group's counts", async () => /60 instances: 60 succeeded/.test((await page.textContent('[data-testid="task-map"]')) ?? ""), 10000);
    await page.click('[data-testid="instances-open"]');
    await waitFor("the first page", async () => (await page.locator('[data-testid="instances"] tbody tr').count()) === 50, 10000);
    assert.equal(await page.getAttribute('[data-testid="instances"] tbody tr:first-child', "data-id"), "process[0]");
    await page.click('[data-testid="instances-next"]');
    await waitFor("the second page", async () => (await page.locator('[data-testid="instances"] tbody tr').count()) === 10, 10000);
    assert.equal(await page.getAttribute('[data-testid="instances"] tbody tr:first-child', "data-id"), "process[50]");
    assert.match(await page.textContent('[data-testid="instances"]'), /process\[59\]\s*succeeded\s*59/);
    await shot(page, "map-group");
  });

  test("the 200-task random DAG is laid out and readable, and finishes", async () => {
    const id = await submitTemplate(page, "random200");
    await waitLayout(page, 200);
    await waitFor("some tasks done", async () => Object.values(await nodeStatuses(page)).filter((s) => s === "succeeded").length >= 20, 60000);
    await shot(page, "random200-running");
    await waitAllNodes(page, "succeeded", 200, 180000);
    await waitDAG(page, id, "succeeded", 20000);
    await shot(page, "random200-succeeded");
    // Zoomed in: labels readable.
    await page.evaluate(() => {
      const cy = window.orion.graph.cy;
      cy.zoom({ level: 1, position: cy.nodes()[0].position() });
    });
    await sleep(300);
    await shot(page, "random200-zoomed");
    await page.click("#zoom-fit");
    await page.click("#tab-timeline");
    await page.waitForSelector("#timeline svg.gantt");
    assert.equal(await page.locator("#timeline svg .row").count(), 200);
    await shot(page, "random200-timeline");
    await page.click("#tab-graph");

    // The metrics and cluster panels are filled.
    assert.match(await page.textContent('[data-testid="m-throughput"]'), /tasks\/s/);
    assert.match(await page.textContent('[data-testid="cluster"]'), /leader: n1/);
    assert.deepEqual(unexpected(b.errors), []);
  });

  test("schedules: the card lists a schedule with its next tick, its runs open their DAG, pause and run now act", async () => {
    const yaml = "id: tick\nschedule:\n  cron: \"@every 1s\"\ntasks:\n  - {id: a, kind: noop}\n";
    const r = await fetch(node.pageURL + "/api/v1/schedules", { method: "POST", headers: { "Content-Type": "application/yaml" }, body: yaml });
    assert.equal(r.status, 201, await r.text());
    const row = '[data-testid="schedules"] tr[data-schedule="tick"]';
    await page.waitForSelector(row, { timeout: 15000 });
    assert.match(await page.textContent(row), /@every 1s/);
    await page.click(row);
    await page.waitForSelector('[data-testid="schedules"] a[data-run^="tick-"]', { timeout: 15000 });
    const run = await page.getAttribute('[data-testid="schedules"] a[data-run^="tick-"]', "data-run");
    await page.click(`[data-testid="schedules"] a[data-run="${run}"]`);
    await waitDAG(page, run, "succeeded", 15000);
    await shot(page, "schedules");
    await page.click(`${row} button[data-action="pause"]`);
    await waitFor("paused", async () => (await page.getAttribute(row, "data-state")) === "paused", 15000);
    await page.click(`${row} button[data-action="trigger"]`);
    await page.waitForSelector('[data-testid="schedules"] a[data-run$="-m"]', { timeout: 15000 });
    const del = await fetch(node.pageURL + "/api/v1/schedules/tick", { method: "DELETE" });
    assert.equal(del.status, 200, await del.text());
  });

  test("hover help explains the algorithms", async () => {
    await page.hover('.algos [data-help="cascade"]');
    const pop = page.locator(".help-pop");
    await waitFor("the help popover", async () => await pop.isVisible(), 5000);
    assert.match(await pop.textContent(), /one level at a time/);
    await shot(page, "help-cascade");
    await page.hover('.algos [data-help="fence"]');
    await waitFor("the fenced-commit help", async () => /CreateRevision/.test((await pop.textContent()) ?? ""), 5000);
    await page.mouse.move(5, 500);
  });

  test("demo mode: auto-demo crashes the scheduler, recovers it and the DAG finishes", async (t) => {
    if (!demo) return t.skip("this orion has no --demo");
    await waitFor("the demo controls", async () => page.isVisible('[data-testid="demo-controls"]'), 10000);
    await page.click("#btn-autodemo");
    await waitFor("the auto-demo to finish", async () => /auto-demo done: DAG succeeded/.test(await narration(page)), 150000, 500);
    const n = await narration(page);
    assert.match(n, /pulling the plug on n1/);
    assert.match(n, /n1 recovered/);
    await shot(page, "demo-single-recovered");
  });

  test("the page survives a restart of the server and catches up", async () => {
    const id = await submitTemplate(page, "fanout");
    await waitFor("a running node", async () => Object.values(await nodeStatuses(page)).includes("running"), 20000);
    await node.proc.kill9();
    node.proc.start(); // same command line, same data: replays from etcd
    await orion.waitLeader([node], { want: "n1" });
    await waitDAG(page, id, "succeeded", 90000);
    await waitAllNodes(page, "succeeded", 15, 20000);
    await shot(page, "restart-caught-up");
  });
});

// ---- auth token -----------------------------------------------------------------

// With --auth-token the page asks for the token, then sends it on every
// call; EventSource cannot send a header, so the page reads the stream with
// fetch, and the full-log link fetches the log and opens it as a blob.
// ---- a big DAG --------------------------------------------------------------

/**
 * A DAG of start, wide tasks after it (every failEvery-th fails, the first
 * `sleeping` run for an hour), a map group of `items` instances after
 * start, and a join after them all.
 */
function bigDAG(wide, failEvery, sleeping, items) {
  const tasks = [{ id: "start", kind: "noop" }];
  const join = ["fan"];
  for (let i = 0; i < wide; i++) {
    const id = "w" + String(i).padStart(5, "0");
    if (i < sleeping) tasks.push({ id, kind: "sleep", duration: "1h", depends_on: ["start"] });
    else if (i % failEvery === 0) tasks.push({ id, command: "exit 3", max_retries: 0, depends_on: ["start"] });
    else tasks.push({ id, kind: "noop", depends_on: ["start"] });
    join.push(id);
  }
  tasks.push({ id: "fan", kind: "noop", depends_on: ["start"], for_each: Array.from({ length: items }, (_, i) => i) });
  tasks.push({ id: "join", kind: "noop", depends_on: join });
  return { id: "big", tasks };
}

describe("console on a big DAG", { timeout: 300000 }, () => {
  const orion = new Orion("big");
  logsOnFailure(orion);
  let node, b, page;
  const wide = 3000, failEvery = 500, sleeping = 2, items = 2000;
  const failed = Math.ceil(wide / failEvery) - 1; // w00000 sleeps

  before(async () => {
    node = await orion.node({ name: "n1", slots: 8, extra: ["--max-tasks-per-dag", "5000", "--max-body-bytes", "4194304"] });
    const r = await api(node.url, "/api/v1/dags", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(bigDAG(wide, failEvery, sleeping, items)),
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    b = await browser();
    page = b.page;
  });

  after(async () => {
    if (b && unexpected(b.errors).length) console.error("page errors:\n" + unexpected(b.errors).join("\n"));
    await b?.close();
    await orion.stop();
  });

  test("a DAG of 5,000 tasks is drawn by groups, stays responsive, and a group opens onto its tasks a page at a time", async () => {
    const t0 = Date.now();
    await page.goto(node.pageURL + "/#dag=big", { waitUntil: "domcontentloaded" });
    await waitFor("the shape laid out", async () => {
      const g = await page.$("#graph");
      return (await g.getAttribute("data-layout")) === "done" && (await g.getAttribute("data-shape")) === "4";
    }, 60000);
    console.log(`big DAG: ${1 + wide + 1 + items + 1} tasks drawn by groups in ${Date.now() - t0} ms`);
    // Four nodes, not thousands: start, the fan-out collapsed, the map group, join.
    assert.deepEqual(Object.keys(await nodeStatuses(page)).sort(), ["fan", "join", "start", "~1"]);
    assert.match(await page.textContent("#dag-meta"), /5003 tasks, drawn by groups/);
    // The page answers while the DAG runs and its events stream in.
    for (let i = 0; i < 5; i++) {
      const t = Date.now();
      await waitFor("the page to answer", async () => (await page.evaluate(() => document.querySelectorAll("#graph").length)) === 1, 10000);
      console.log(`big DAG: the page answered in ${Date.now() - t} ms`);
      await sleep(200);
    }
    // Settled: the failures counted in the group's node and in the DAG's counts.
    await waitFor("the DAG settled", async () => {
      const c = await page.evaluate(() => window.orion.current?.counts ?? {});
      return c.failed === failed && c.running === sleeping && (c.succeeded ?? 0) >= wide - failed - sleeping + items;
    }, 120000, 500);
    await waitFor("the fan-out node failed", async () => (await nodeStatuses(page))["~1"] === "failed", 10000);
    await shot(page, "big-dag");

    // The fan-out group: its counts, then its tasks a page at a time.
    const pos = await page.evaluate(() => window.orion.graph.cy.getElementById("~1").renderedPosition());
    const box = await page.locator("#graph").boundingBox();
    await page.mouse.click(box.x + pos.x, box.y + pos.y);
    await waitFor("the group panel", async () => /w00000, w00001, w00002/.test((await page.textContent('[data-testid="group-title"]').catch(() => "")) ?? ""), 10000);
    // The shape's counts may be a second older than the DAG's: the next refresh brings them.
    await waitFor("the group's counts", async () => new RegExp(`failed ${failed}`).test(await page.textContent('[data-testid="group-counts"]')), 15000);
    await page.click('[data-testid="group-open"]');
    const rows = () => page.locator('[data-testid="group-tasks"] tbody tr').count();
    await waitFor("the first page", async () => (await rows()) === 100, 10000);
    assert.equal(await page.getAttribute('[data-testid="group-tasks"] tbody tr:first-child', "data-id"), "w00000");
    await page.click('[data-testid="group-more"]');
    await waitFor("the second page", async () => (await rows()) === 200, 10000);
    await page.selectOption('[data-testid="group-filter"]', "failed");
    await waitFor("the failed ones", async () => (await rows()) === failed && /all of them/.test(await page.textContent('[data-testid="group-info"]')), 20000);
    await shot(page, "big-dag-group");
    // A task of the list opens alone.
    await page.click('[data-testid="group-tasks"] tbody tr:first-child a');
    await waitFor("the task panel", async () => (await page.textContent('[data-testid="task-id"]').catch(() => "")) === "w00500", 10000);
    assert.match(await page.textContent("#task-body"), /exit code\s*3/);

    // The map group: its instances.
    const mpos = await page.evaluate(() => window.orion.graph.cy.getElementById("fan").renderedPosition());
    await page.mouse.click(box.x + mpos.x, box.y + mpos.y);
    await waitFor("the map group's panel", async () => (await page.textContent('[data-testid="group-title"]').catch(() => "")) === "fan", 10000);
    await page.click('[data-testid="group-open"]');
    await waitFor("its first instances", async () => (await rows()) === 100, 10000);
    assert.equal(await page.getAttribute('[data-testid="group-tasks"] tbody tr:first-child', "data-id"), "fan[0]");
    assert.deepEqual(unexpected(b.errors), []);
  });
});

describe("console with an auth token", { timeout: 240000 }, () => {
  const TOKEN = "console-test-token";
  const orion = new Orion("token");
  logsOnFailure(orion);
  let node, b, page;

  before(async () => {
    node = await orion.node({ name: "n1", slots: 4, token: TOKEN });
    b = await browser();
    page = b.page;
  });

  after(async () => {
    // The page's first calls, before it has the token, answer 401.
    const errs = unexpected(b?.errors ?? []).filter((e) => !/status of 401/.test(e));
    if (errs.length) console.error("page errors:\n" + errs.join("\n"));
    await b?.close();
    await orion.stop();
  });

  test("the page asks for the token, then streams, submits and opens a log with it", async () => {
    const denied = await api(node.url, "/api/v1/dags");
    assert.equal(denied.status, 401, "the API answered without the token");
    await page.goto(node.pageURL, { waitUntil: "domcontentloaded" });
    await waitFor("the token field", async () => page.isVisible("#auth-token"), 20000);
    await page.fill("#auth-token", TOKEN);
    await page.click("#auth-save"); // stores it for the tab and reloads
    await waitFor("the live stream with the token", async () => /live/.test((await page.textContent('[data-testid="conn"]')) ?? ""), 20000);
    assert.equal(await page.isVisible("#auth-token"), false, "the token field is still shown");
    const id = await submitTemplate(page, "diamond");
    await waitLayout(page, 4);
    // Every state change reaches the page over the fetch-read stream.
    await waitAllNodes(page, "succeeded", 4, 30000);
    await waitDAG(page, id, "succeeded", 10000);
    await clickNode(page, "left");
    const [tab] = await Promise.all([page.context().waitForEvent("page"), page.click('[data-testid="log-link"]')]);
    await waitFor("the log in the new tab", async () => /parsed 42/.test((await tab.textContent("body").catch(() => "")) ?? ""), 15000);
    assert.match(tab.url(), /^blob:/);
    await tab.close();
    await shot(page, "token-diamond-succeeded");
  });
});

// ---- cluster ------------------------------------------------------------------

// A cluster of real processes: 3 etcd members, 3 replicas without slots and
// 2 workers (Orion.cluster starts any number of each). The page is served
// by a standby.
describe("console on a cluster", { timeout: 480000 }, () => {
  const orion = new Orion("cluster");
  logsOnFailure(orion);
  let c, b, page, standby, demo;

  before(async () => {
    demo = await demoFlag(orion);
    c = await orion.cluster({ etcd: 3, servers: 3, workers: 2, workerSlots: 4, serverExtra: demo ? ["--demo"] : [] });
    standby = orion.servers.find((s) => s.name !== c.leader);
    b = await browser();
    page = b.page;
    await open(page, standby.pageURL);
  });

  after(async () => {
    if (b && unexpected(b.errors).length) console.error("page errors:\n" + unexpected(b.errors).join("\n"));
    await b?.close();
    await orion.stop();
  });

  test("replicas, workers and etcd members are shown; a DAG submitted to a standby runs", async () => {
    await waitFor("3 replicas and 2 workers in the cluster panel", async () => {
      const rows = await page.locator("#cluster-body tr[data-replica]").count();
      const workers = await page.locator("#cluster-body [data-worker]").count();
      return rows === 3 && workers >= 2;
    }, 20000);
    assert.equal(await page.locator('#cluster-body tr[data-role="leader"]').count(), 1);
    assert.equal(await page.textContent('[data-testid="leader"]'), c.leader);
    // Each standalone worker says which host it runs on (this one).
    const hosts = await page.locator('#cluster-body [data-testid="worker-host"]').allTextContents();
    assert.ok(hosts.length >= 2 && hosts.every((s) => s === ` on ${os.hostname()}`), `worker hosts: ${JSON.stringify(hosts)}`);
    const id = await submitTemplate(page, "fanout");
    await waitAllNodes(page, "succeeded", 15, 60000);
    await waitDAG(page, id, "succeeded", 10000);
    await shot(page, "cluster-fanout");
  });

  test("demo mode: auto-demo kills the leader, a standby takes over, the DAG finishes", async (t) => {
    if (!demo) return t.skip("this orion has no --demo");
    const before = await orion.waitLeader(orion.servers);
    await waitFor("the demo controls", async () => page.isVisible('[data-testid="demo-controls"]'), 10000);
    await page.click("#btn-autodemo");
    await waitFor("a takeover", async () => /took over/.test(await narration(page)), 60000, 250);
    await waitFor("the auto-demo to finish", async () => /auto-demo done: DAG succeeded/.test(await narration(page)), 150000, 500);
    const after = await orion.waitLeader(orion.servers, { not: before });
    assert.match(await narration(page), new RegExp(`pulling the plug on ${before}`));
    await shot(page, "demo-cluster-takeover");
    // The demo recovers the crashed replica as a standby.
    await waitFor("3 reachable replicas", async () => (await page.locator('#cluster-body tr[data-role="standby"]').count()) === 2, 30000);
  });

  test("killing the leader: the page follows the takeover", async () => {
    // Follow a replica that is not the one about to be killed.
    let old = await orion.waitLeader(orion.servers);
    if (old === standby.name) {
      standby = orion.servers.find((s) => s.name !== old);
      await open(page, standby.pageURL);
    }
    const id = await submitTemplate(page, "random200");
    await waitLayout(page, 200);
    await waitFor("progress", async () => Object.values(await nodeStatuses(page)).filter((s) => s === "succeeded").length >= 10, 60000);
    old = await orion.waitLeader(orion.servers);
    assert.notEqual(old, standby.name, "the page's replica became the leader");
    const leader = orion.servers.find((s) => s.name === old);
    await leader.proc.kill9();
    const rest = orion.servers.filter((s) => s.name !== old);
    const now = await orion.waitLeader(rest, { not: old });
    await waitFor("the new leader in the page", async () => (await page.textContent('[data-testid="leader"]')) === now, 20000);
    await waitDAG(page, id, "succeeded", 180000);
    assert.match(await page.textContent('[data-testid="narration"]'), new RegExp(`${now} is the leader now`));
    await shot(page, "cluster-takeover");
  });
});
