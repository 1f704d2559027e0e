// Starts a real `idemwatch serve` per backend on a free port, with the clients' tools file.
// The binary comes from IDEMWATCH_BIN (default target/debug/idemwatch at the repository
// root). PostgreSQL needs IDEMWATCH_TEST_PG_URL or TEST_DATABASE_URL: without one its runs
// are skipped loudly, and under CI=true they fail.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// clients/run-tests.sh runs a copy of these tests against the installed tarball, from
// outside the repository: it names the repository.
export const REPO = process.env.IDEMWATCH_REPO || resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const TOOLS_FILE = join(REPO, "clients", "testdata", "tools.toml");
export const CI = ["1", "true", "yes"].includes((process.env.CI ?? "").toLowerCase());
export const PG_SKIP = "*** SKIPPED (PostgreSQL unavailable: set IDEMWATCH_TEST_PG_URL or TEST_DATABASE_URL) ***";

export const serverBinary = () => process.env.IDEMWATCH_BIN || join(REPO, "target", "debug", "idemwatch");
export const pgUrl = () => process.env.IDEMWATCH_TEST_PG_URL || process.env.TEST_DATABASE_URL || null;

// A loopback port below the kernel's ephemeral range, checked free by listening on it.
// A port from the ephemeral range (listen on 0, close) can be given to any outgoing
// connection before the server binds it ("Address already in use"); below the range only
// another listener can take it. Same rule as tests/it/support/pg.rs.
let nextPort = 0;
export async function freePort() {
  let ephemeral = 32768;
  try {
    ephemeral = Number.parseInt(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").split(/\s+/)[0], 10) || ephemeral;
  } catch {
    // not Linux: the usual lower bound
  }
  const lowest = 10000;
  const span = Math.max(ephemeral - lowest, 1000);
  const start = (process.pid * 7919) % span;
  for (let i = 0; i < span; i++) {
    const port = lowest + ((start + nextPort++) % span);
    const free = await new Promise((done) => {
      const s = createServer();
      s.once("error", () => done(false));
      s.listen(port, "127.0.0.1", () => s.close(() => done(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free loopback port in ${lowest}..${lowest + span}`);
}

/**
 * Why this backend cannot run here, or null. Under CI a missing backend throws instead.
 */
export function unavailable(backend) {
  let why = null;
  if (!existsSync(serverBinary())) why = `*** SKIPPED (idemwatch binary not found at ${serverBinary()}; build it or set IDEMWATCH_BIN) ***`;
  else if (backend === "postgres" && !pgUrl()) why = PG_SKIP;
  if (why && CI) throw new Error(`CI=true: ${why}`);
  if (why) console.error(`\n${why}\n`);
  return why;
}

/**
 * A real `idemwatch serve` on `backend`. `extra`: more flags; `port` and `dir` (the SQLite
 * database's folder): those of an earlier server, to start it again on the same database.
 */
export async function startServer(backend, { extra = [], port: samePort, dir } = {}) {
  const tmp = dir ?? mkdtempSync(join(tmpdir(), `idemwatch-js-${backend}-`));
  const database = backend === "sqlite" ? `sqlite://${join(tmp, "guard.db")}` : pgUrl();
  const port = samePort ?? (await freePort());
  const args = ["serve", "--listen", `127.0.0.1:${port}`, "--database-url", database, "--tools-file", TOOLS_FILE];
  const help = spawnSync(serverBinary(), ["serve", "--help"], { encoding: "utf8" }).stdout ?? "";
  // A short lease margin keeps the killed-worker case to seconds, where the server has one.
  if (help.includes("--lease-margin")) args.push("--lease-margin", "2s");
  args.push(...extra);
  const child = spawn(serverBinary(), args, { env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const keep = (chunk) => (output = (output + chunk).slice(-20_000));
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  const exited = new Promise((r) => child.once("close", r));
  const url = `http://127.0.0.1:${port}`;
  const tail = () => output.split("\n").slice(-40).join("\n");
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      await exited;
      throw new Error(`idemwatch serve (${backend}) exited ${child.exitCode}:\n${tail()}`);
    }
    try {
      const r = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) {
        const end = async (signal) => {
          child.kill(signal);
          await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", r)));
        };
        return {
          url,
          backend,
          port,
          dir: tmp,
          tail,
          stop: () => end("SIGTERM"),
          /** SIGKILL: a graceful stop would wait for the long polls in progress. */
          kill: () => end("SIGKILL"),
        };
      }
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGKILL");
  throw new Error(`idemwatch serve (${backend}) did not become ready:\n${tail()}`);
}
