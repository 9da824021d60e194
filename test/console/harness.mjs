// Harness of the console's browser tests: real orion processes on free
// 127.0.0.1 ports with temporary data directories, and Debian's Chromium
// driven by playwright-core (never a downloaded browser).
//
//   ORION_BIN        the orion binary to test (default: built here with
//                    `go build` into a temporary directory)
//   CHROMIUM         the browser (default /usr/bin/chromium)
//   ORION_CONSOLE_PROXY_BIN
//                    temporary, while the console is not mounted in the API:
//                    a program run as `BIN -listen ADDR -backend URL` that
//                    serves internal/http/console and proxies the API to URL;
//                    pages then open it instead of the server
//
// Every process is started in its own process group and stopped by its pid
// (SIGTERM, then SIGKILL after a bound); logs stay in the temporary
// directory, and their tails are printed when a test fails.
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, mkdirSync, openSync, closeSync, readFileSync, existsSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const ARTIFACTS = join(REPO, "test/artifacts/console");

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An error that ends a waitFor at once (a process died, say). */
export class Fatal extends Error {}

/** Polls fn until it returns a truthy value; throws after timeoutMs, or at once on a Fatal. */
export async function waitFor(what, fn, timeoutMs = 30000, everyMs = 100) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (e instanceof Fatal) throw e;
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}` + (last ? `: ${last.message}` : ""));
}

// Ports handed out in this process: the kernel may offer a port that was
// just closed again, and two processes given the same one fight over it.
const portsGiven = new Set();

/** A loopback port that was free a moment ago and not handed out before. */
export async function freePort() {
  for (let i = 0; i < 1000; i++) {
    const port = await new Promise((res, rej) => {
      const s = createServer();
      s.unref();
      s.on("error", rej);
      s.listen(0, "127.0.0.1", () => {
        const { port } = s.address();
        s.close(() => res(port));
      });
    });
    if (!portsGiven.has(port)) {
      portsGiven.add(port);
      return port;
    }
  }
  throw new Error("no loopback port left that was not handed out already");
}

async function freePorts(n) {
  const out = [];
  while (out.length < n) out.push(await freePort());
  return out;
}

/** A temporary directory for one test run; removed by cleanup() unless KEEP_TMP is set. */
export function tempDir(prefix = "orion-console-") {
  return mkdtempSync(join(tmpdir(), prefix));
}

let built = null;
/** The orion binary: ORION_BIN, or a fresh `go build` of this repository. */
export async function orionBin(dir) {
  if (process.env.ORION_BIN) {
    if (!existsSync(process.env.ORION_BIN)) throw new Error(`ORION_BIN=${process.env.ORION_BIN}: no such file`);
    return process.env.ORION_BIN;
  }
  if (built) return built;
  const out = join(dir, "orion");
  await new Promise((res, rej) => {
    execFile("go", ["build", "-o", out, "./cmd/orion"], { cwd: REPO, timeout: 300000 }, (err, _o, stderr) =>
      err ? rej(new Error(`go build failed: ${err.message}\n${stderr}`)) : res(),
    );
  });
  built = out;
  return out;
}

/** Whether `bin sub --help` lists --flag (e.g. whether this build has --demo). */
export function hasFlag(bin, sub, flag) {
  return new Promise((res) => {
    execFile(bin, [sub, "--help"], { timeout: 20000 }, (_err, stdout, stderr) => res(new RegExp(`--${flag}(?![\\w-])`).test(stdout + stderr)));
  });
}

/** One child process, in its own process group, logging to a file. */
export class Proc {
  constructor(name, bin, args, dir) {
    this.name = name;
    this.bin = bin;
    this.args = args;
    this.dir = dir;
    this.logPath = join(dir, name + ".log");
    this.child = null;
    this.exited = null;
    this.error = null;
  }

  start() {
    mkdirSync(this.dir, { recursive: true });
    const fd = openSync(this.logPath, "a");
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ORION_")));
    this.child = spawn(this.bin, this.args, { cwd: this.dir, env, stdio: ["ignore", fd, fd], detached: true });
    closeSync(fd);
    this.error = null;
    const child = this.child;
    this.exited = new Promise((res) => {
      child.once("exit", (code, sig) => res({ code, sig }));
      child.once("error", (e) => {
        this.error = e;
        res({ code: null, sig: null, error: e });
      });
    });
    return this;
  }

  get pid() {
    return this.child?.pid;
  }

  alive() {
    return !!this.child && !this.error && this.child.pid !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGTERM, then SIGKILL after graceMs; waits for the exit. */
  async stop(graceMs = 10000) {
    if (!this.alive()) return;
    try {
      process.kill(this.child.pid, "SIGTERM");
    } catch {
      return;
    }
    const t = setTimeout(() => {
      try {
        process.kill(this.child.pid, "SIGKILL");
      } catch {
        // gone
      }
    }, graceMs);
    await Promise.race([this.exited, sleep(graceMs + 5000)]);
    clearTimeout(t);
  }

  /** kill -9, as a crash. */
  async kill9() {
    if (!this.alive()) return;
    try {
      process.kill(this.child.pid, "SIGKILL");
    } catch {
      return;
    }
    await Promise.race([this.exited, sleep(5000)]);
  }

  tail(n = 40) {
    if (!existsSync(this.logPath)) return "";
    const lines = readFileSync(this.logPath, "utf8").split("\n");
    return lines.slice(-n).join("\n");
  }
}

async function getJSON(url, timeoutMs = 2000, token = "") {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const r = await fetch(url, { signal: ctl.signal, headers: token ? { Authorization: `Bearer ${token}` } : {} });
    const text = await r.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: r.status, body, text, type: r.headers.get("content-type") ?? "" };
  } finally {
    clearTimeout(t);
  }
}

/**
 * A set of orion processes started by one test; stop() ends them all, by pid.
 * Use node() for a lone server with an embedded etcd member, or cluster()
 * for etcd members, replicas and workers.
 */
export class Orion {
  constructor(name = "console") {
    this.dir = tempDir(`orion-${name}-`);
    this.procs = [];
    this.servers = []; // {name, url, pageURL, proc}
  }

  async bin() {
    return orionBin(this.dir);
  }

  async spawn(name, args) {
    const p = new Proc(name, await this.bin(), args, join(this.dir, name)).start();
    this.procs.push(p);
    return p;
  }

  /** Where a page opens a server: the server, or the temporary console proxy in front of it. */
  async front(name, url) {
    const proxyBin = process.env.ORION_CONSOLE_PROXY_BIN;
    if (!proxyBin) return url;
    const port = await freePort();
    const p = new Proc(name + "-console", proxyBin, ["-listen", `127.0.0.1:${port}`, "-backend", url], join(this.dir, name)).start();
    this.procs.push(p);
    const front = `http://127.0.0.1:${port}`;
    await waitFor(`console proxy of ${name}`, async () => (await getJSON(front + "/healthz")).status === 200, 20000);
    return front;
  }

  /**
   * A lone `orion server` with an embedded etcd member and `slots` slots
   * (and an API token when token is set), ready and leading. Short retry timings keep tests fast.
   */
  async node({ name = "n1", slots = 4, token = "", extra = [] } = {}) {
    const [api, client, peer] = await freePorts(3);
    const url = `http://127.0.0.1:${api}`;
    const proc = await this.spawn(name, [
      "server",
      "--name", name,
      "--listen", `127.0.0.1:${api}`,
      "--data-dir", join(this.dir, name, "data"),
      "--embedded-etcd-client-url", `http://127.0.0.1:${client}`,
      "--embedded-etcd-peer-url", `http://127.0.0.1:${peer}`,
      "--slots", String(slots),
      "--retry-base", "300ms", "--retry-cap", "2s", "--orphan-grace", "500ms",
      "--log-format", "json",
      ...(token ? ["--auth-token", token] : []),
      ...extra,
    ]);
    await this.waitLeader([{ name, url, proc, token }], { want: name });
    const s = { name, url, proc, token, pageURL: await this.front(name, url) };
    this.servers.push(s);
    return s;
  }

  /**
   * A cluster as test/cluster.sh starts it: `etcd` members (`orion etcd`),
   * `servers` replicas with `serverSlots` slots each, and `workers` workers
   * with `workerSlots` slots; serverExtra are more flags for every replica
   * (e.g. ["--demo"]). Returns once one replica leads and every replica is
   * ready.
   */
  async cluster({ etcd = 3, servers = 3, workers = 2, serverSlots = 0, workerSlots = 4, serverExtra = [] } = {}) {
    const members = [];
    for (let i = 1; i <= etcd; i++) {
      const [client, peer] = await freePorts(2);
      members.push({ name: `e${i}`, client: `http://127.0.0.1:${client}`, peer: `http://127.0.0.1:${peer}` });
    }
    const initial = members.map((m) => `${m.name}=${m.peer}`).join(",");
    const endpoints = members.map((m) => m.client).join(",");
    for (const m of members) {
      m.proc = await this.spawn(m.name, [
        "etcd", "--name", m.name, "--data-dir", join(this.dir, m.name, "data"),
        "--listen-client-url", m.client, "--listen-peer-url", m.peer,
        "--initial-cluster", initial, "--initial-cluster-state", "new",
      ]);
    }
    for (const m of members) {
      await waitFor(`etcd ${m.name} healthy`, async () => {
        if (!m.proc.alive()) throw new Fatal(`etcd ${m.name} ${m.proc.error ? "did not start: " + m.proc.error.message : "exited"}:\n${m.proc.tail()}`);
        return (await getJSON(m.client + "/health")).body?.health === "true";
      }, 60000, 200);
    }
    const reps = [];
    for (let i = 1; i <= servers; i++) {
      const [api] = await freePorts(1);
      const name = `n${i}`;
      const url = `http://127.0.0.1:${api}`;
      const proc = await this.spawn(name, [
        "server", "--name", name, "--etcd-endpoints", endpoints,
        "--listen", `127.0.0.1:${api}`, "--data-dir", join(this.dir, name, "data"),
        "--slots", String(serverSlots), "--log-format", "json",
        "--retry-base", "300ms", "--retry-cap", "2s", "--orphan-grace", "500ms",
        ...serverExtra,
      ]);
      reps.push({ name, url, proc });
    }
    const leader = await this.waitLeader(reps);
    for (const r of reps) {
      await waitFor(`${r.name} ready`, async () => (await getJSON(r.url + "/readyz")).status === 200, 60000, 200);
      r.pageURL = await this.front(r.name, r.url);
      this.servers.push(r);
    }
    const urls = reps.map((r) => r.url).join(",");
    for (let i = 1; i <= workers; i++) {
      await this.spawn(`w${i}`, ["worker", "--server", urls, "--slots", String(workerSlots), "--name", `w${i}`]);
    }
    if (workers > 0) {
      await waitFor(`${workers} workers connected`, async () => {
        const c = (await getJSON(reps[0].url + "/api/v1/cluster", 4000)).body;
        return (c?.workers ?? []).filter((w) => w.connected && w.slots > 0).length >= workers;
      }, 60000, 250);
    }
    return { leader, replicas: reps, etcd: members, endpoints };
  }

  /**
   * Waits until one of servers leads and returns its name. A replica counts
   * only when it says so itself (/api/v1/cluster/self) and is ready: a
   * standby's idea of the leader lags a kill -9 by the session TTL, so asking
   * it would return the dead leader. want: wait for that one; not: ignore
   * that one (the leader just killed or crashed).
   */
  async waitLeader(servers, { want, not } = {}) {
    return waitFor(want ? `${want} to lead` : not ? `a leader other than ${not}` : "a leader", async () => {
      for (const s of servers) {
        if (s.proc && !s.proc.alive()) throw new Fatal(`${s.name} ${s.proc.error ? "did not start: " + s.proc.error.message : "exited"}:\n${s.proc.tail()}`);
      }
      for (const s of servers) {
        if (s.name === not || (want && s.name !== want)) continue;
        const r = await getJSON(s.url + "/api/v1/cluster/self", 2000, s.token).catch(() => null);
        if (r?.status !== 200 || r.body?.role !== "leader" || r.body?.name !== s.name) continue;
        const ready = await getJSON(s.url + "/readyz").catch(() => null);
        if (ready?.status === 200) return s.name;
      }
      return null;
    }, 90000, 150);
  }

  async stop() {
    await Promise.all(this.procs.map((p) => p.stop()));
    if (!process.env.KEEP_TMP) rmSync(this.dir, { recursive: true, force: true });
  }

  logs(n = 30) {
    return this.procs.map((p) => `--- ${p.name} (${p.logPath})\n${p.tail(n)}`).join("\n");
  }
}

/**
 * Debian's Chromium, headless, with a fresh profile. Returns {context, page,
 * errors, close}: errors collects page errors and console errors.
 */
export async function browser({ width = 1600, height = 1000 } = {}) {
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
  if (!existsSync(executablePath)) throw new Error(`no browser at ${executablePath}: apt-get install -y chromium`);
  const profile = tempDir("orion-chromium-");
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width, height },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    timeout: 60000,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push("console: " + m.text());
  });
  return {
    context,
    page,
    errors,
    close: async () => {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot under test/artifacts/console/. */
export async function shot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, name + ".png");
  await page.screenshot({ path });
  return path;
}
