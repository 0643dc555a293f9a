// A runner written from the protocol pages alone (docs/protocol.md,
// docs/protocol-env.md, docs/conformance.md) in another language: Node.js
// with its standard library only (its own WebSocket client and SigV4
// signer). It implements the `lease`, `rotation`, `narrowing`, `deny`,
// `unavailable` and `env-replica` parts; not `refresh`.
//
// Environment: LEASEGATE_BRIDGE_URL, LEASEGATE_SSM_ENDPOINT,
// LEASEGATE_TASK_ID, LEASEGATE_RUN_EPOCH, LEASEGATE_BOOT_ID. Runs until
// SIGTERM. `node node_runner.js FAULT` plants one fault (for the kit's own
// tests):
// `dup-key-ack` writes `ok` twice in every ack; `binary-ack` sends acks as
// binary messages; `ack-leaks-value` puts each value it read in its ack.
// NODE_RUNNER_SECRETS_FILE: append every
// secret the runner receives or reads (session keys, env values), one a
// line, so a test can check that no report holds one.
"use strict";
const net = require("net");
const http = require("http");
const crypto = require("crypto");

const env = process.env;
const TASK = env.LEASEGATE_TASK_ID;
const RUN = Number(env.LEASEGATE_RUN_EPOCH);
const BOOT = env.LEASEGATE_BOOT_ID;
const FAULT = process.argv[2] || "";
const RETRY_MS = 30000;
const fs = require("fs");
function keep(secret) {
  if (env.NODE_RUNNER_SECRETS_FILE && typeof secret === "string" && secret.length >= 8) {
    fs.appendFileSync(env.NODE_RUNNER_SECRETS_FILE, secret + "\n");
  }
}

// ---- WebSocket client (RFC 6455, text frames, client masking) ----
function wsConnect(url, onText) {
  const u = new URL(url);
  const sock = net.connect(Number(u.port), u.hostname);
  const key = crypto.randomBytes(16).toString("base64");
  let buf = Buffer.alloc(0);
  let open = false;
  let fragments = [];
  const api = {
    send(text, binary) {
      const payload = Buffer.from(text, "utf8");
      const mask = crypto.randomBytes(4);
      let head;
      const op = binary ? 0x82 : 0x81;
      if (payload.length < 126) head = Buffer.from([op, 0x80 | payload.length]);
      else if (payload.length < 65536) {
        head = Buffer.alloc(4);
        head[0] = op; head[1] = 0x80 | 126; head.writeUInt16BE(payload.length, 2);
      } else {
        head = Buffer.alloc(10);
        head[0] = op; head[1] = 0x80 | 127; head.writeBigUInt64BE(BigInt(payload.length), 2);
      }
      const masked = Buffer.alloc(payload.length);
      for (let i = 0; i < payload.length; i++) masked[i] = payload[i] ^ mask[i % 4];
      sock.write(Buffer.concat([head, mask, masked]));
    },
    control(op, payload) {
      const mask = crypto.randomBytes(4);
      const masked = Buffer.alloc(payload.length);
      for (let i = 0; i < payload.length; i++) masked[i] = payload[i] ^ mask[i % 4];
      sock.write(Buffer.concat([Buffer.from([0x80 | op, 0x80 | payload.length]), mask, masked]));
    },
    onopen: null,
  };
  sock.on("connect", () => {
    sock.write(
      `GET ${u.pathname || "/"}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\n` +
        `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
  });
  sock.on("data", (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    if (!open) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const status = buf.slice(0, end).toString().split("\r\n")[0];
      if (!/ 101 /.test(status)) { process.stderr.write(`handshake: ${status}\n`); process.exit(3); }
      buf = buf.slice(end + 4);
      open = true;
      if (api.onopen) api.onopen();
    }
    for (;;) {
      if (buf.length < 2) return;
      const fin = buf[0] & 0x80, op = buf[0] & 0x0f;
      let len = buf[1] & 0x7f, off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
      if (buf[1] & 0x80) off += 4; // a server never masks; tolerate it anyway
      if (buf.length < off + len) return;
      const payload = buf.slice(off, off + len);
      buf = buf.slice(off + len);
      if (op === 0x9) api.control(0xa, payload);
      else if (op === 0x8) { sock.end(); process.exit(0); }
      else if (op === 0x1 || op === 0x2 || op === 0x0) {
        fragments.push(payload);
        if (fin) { const text = Buffer.concat(fragments).toString("utf8"); fragments = []; onText(text); }
      }
    }
  });
  sock.on("error", (e) => { process.stderr.write(`socket: ${e.code}\n`); process.exit(3); });
  sock.on("close", () => process.exit(0));
  return api;
}

// ---- SSM GetParameters, signed with SigV4 ----
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const hmac = (k, s) => crypto.createHmac("sha256", k).update(s).digest();

function ssmCall(session, region, target, body) {
  const endpoint = new URL(env.LEASEGATE_SSM_ENDPOINT);
  const payload = JSON.stringify(body);
  const now = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
  const date = now.slice(0, 8);
  const headers = {
    "content-type": "application/x-amz-json-1.1",
    host: endpoint.host,
    "x-amz-date": now,
    "x-amz-security-token": session.sessionToken,
    "x-amz-target": `AmazonSSM.${target}`,
  };
  const names = Object.keys(headers).sort();
  const canonical = ["POST", "/", "", ...names.map((n) => `${n}:${headers[n]}`), "", names.join(";"), sha(payload)].join("\n");
  const scope = `${date}/${region}/ssm/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", now, scope, sha(canonical)].join("\n");
  let k = hmac("AWS4" + session.secretAccessKey, date);
  for (const p of [region, "ssm", "aws4_request"]) k = hmac(k, p);
  const signature = crypto.createHmac("sha256", k).update(toSign).digest("hex");
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${session.accessKeyId}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`;
  return new Promise((resolve) => {
    const req = http.request(
      { host: endpoint.hostname, port: endpoint.port, method: "POST", path: "/", headers },
      (res) => {
        const parts = [];
        res.on("data", (d) => parts.push(d));
        res.on("end", () => {
          try { resolve(res.statusCode === 200 ? JSON.parse(Buffer.concat(parts).toString()) : null); }
          catch { resolve(null); }
        });
      },
    );
    req.on("error", () => resolve(null));
    req.end(payload);
  });
}

async function getParameters(lease, sessionId, selectors) {
  const session = lease.sessions.find((s) => s.id === sessionId && s.purpose === "credentials");
  if (!session) return [];
  const out = [];
  for (let i = 0; i < selectors.length; i += 10) { // at most ten names a call
    const r = await ssmCall(session, lease.region, "GetParameters", { Names: selectors.slice(i, i + 10), WithDecryption: true });
    if (r && r.Parameters) out.push(...r.Parameters);
  }
  return out;
}

// ---- lease registry ----
let ws;
let opCounter = 0;
let pending = null;
let lease = null;
let retryTimer = null;
let generation = 0; // bumped whenever the lease is replaced or dropped

function send(frame) { ws.send(JSON.stringify(frame)); }

function request() {
  if (retryTimer) { clearTimeout(retryTimer); retryTimer = null; }
  pending = `op-${++opCounter}`;
  send({ kind: "lease.request", opId: pending, taskId: TASK, runEpoch: RUN });
}

function retryLater() {
  pending = null;
  if (retryTimer) clearTimeout(retryTimer);
  retryTimer = setTimeout(request, RETRY_MS);
}

function entries(m) {
  return [...m.engines, ...m.mcp.filter((e) => e.parameter), ...[m.github, m.ssh].filter((x) => x)];
}

const STALE_KEYS = ["kind", "taskId", "runEpoch", "wantedRevision", "minRevision", "removed"];
const exactKeys = (f, keys) => Object.keys(f).length === keys.length && keys.every((k) => k in f);
const mine = (f) => f.taskId === TASK && f.runEpoch === RUN;

async function onLease(f) {
  if (f.kind === "lease.grant.v1" && pending !== null && f.opId === pending) {
    const l = f.lease;
    if (!l || l.taskId !== TASK || l.runEpoch !== RUN) return;
    pending = null;
    lease = l;
    for (const s of l.sessions) { keep(s.secretAccessKey); keep(s.sessionToken); }
    const gen = ++generation;
    const bySession = new Map();
    for (const e of entries(l.manifest)) {
      if (!bySession.has(e.sessionId)) bySession.set(e.sessionId, []);
      bySession.get(e.sessionId).push(`${e.parameter}:${e.version}`);
    }
    for (const [sid, sels] of bySession) { if (gen !== generation) return; await getParameters(l, sid, sels); }
    if (gen === generation) { leaseReady = true; flushEnv(); }
  } else if ((f.kind === "lease.deny" || f.kind === "lease.unavailable") && pending !== null && f.opId === pending) {
    if (f.kind === "lease.deny") { lease = null; leaseReady = false; generation++; }
    retryLater();
  } else if (f.kind === "lease.stale" && mine(f) && exactKeys(f, STALE_KEYS) && Array.isArray(f.removed)) {
    if (lease && f.wantedRevision <= lease.manifestRevision) return;
    if (lease && f.minRevision !== null && lease.manifestRevision < f.minRevision) {
      lease = null; leaseReady = false; generation++;
    }
    request();
  } else if (f.kind === "credential.changed" && mine(f) && lease) {
    if (!Number.isSafeInteger(f.version) || f.version < 1) return;
    const e = entries(lease.manifest).find((x) => x.credentialId === f.credentialId);
    if (e) await getParameters(lease, e.sessionId, [`${e.parameter}:${f.version}`]);
  }
}

// ---- env replica ----
let leaseReady = false;
const envQueue = []; // frames waiting for the lease (activation_pending otherwise)
let envBusy = false;
const replica = { stream: null, seq: 0, attempt: null, staged: null, live: null, receipts: new Map(), pageAcks: new Map() };

function canon(v) {
  if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
  if (v && typeof v === "object") return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

function ack(f, cursor, rest) {
  const a = {
    kind: "env.replica.v1.ack", opId: f.opId, taskId: f.taskId, runEpoch: f.runEpoch,
    runnerBootId: f.runnerBootId, streamId: f.streamId, attemptId: f.attemptId,
    policyEpochs: [1], appliedThrough: { streamId: f.streamId, sequence: cursor }, ...rest,
  };
  let text = JSON.stringify(a);
  if (FAULT === "dup-key-ack") text = text.replace('"ok":', '"ok":true,"ok":');
  ws.send(text, FAULT === "binary-ack");
}

const PHASE = { "env.replica.v1.begin": "begun", "env.replica.v1.page": "page", "env.replica.v1.apply": "applied", "env.replica.v1.commit": "complete" };
function err(f, code) {
  const onStream = f.runnerBootId === BOOT && mine(f) && replica.stream === f.streamId;
  ack(f, onStream ? replica.seq : 0, { ok: false, phase: PHASE[f.kind], code, error: code });
}

async function materialize(projectId, st) {
  if (st.head.tombstone) return { kind: "withheld", reason: "tombstone" };
  if (st.policyEpoch !== 1) return { kind: "withheld", reason: "policy_epoch_unknown" };
  if (st.binding && st.binding.kind === "omit") return { kind: "withheld", reason: "binding_omits" };
  if (st.binding && st.binding.kind === "withhold") return { kind: "withheld", reason: st.binding.reason };
  const ref = st.head.valueRef;
  if (!ref) return { kind: "unavailable", reason: "value_reference_invalid" };
  if (ref.kind === "row") return { kind: "unavailable", reason: "value_unavailable" };
  const p = lease && lease.manifest.projects.find((x) => x.projectId === projectId);
  if (!p) return { kind: "unavailable", reason: "value_unavailable" };
  const keyHash = sha(st.key);
  const sel = ref.kind === "staged" ? `/uai/projects/${projectId}/env-values/${keyHash}/${ref.stagingId}` : `/uai/projects/${projectId}/env/${st.key}:${ref.ssmVersion}`;
  const got = await getParameters(lease, p.sessionId, [sel]);
  if (!got.length) return { kind: "unavailable", reason: "value_missing" };
  let e;
  try { e = JSON.parse(got[0].Value); } catch { return { kind: "unavailable", reason: "value_unavailable" }; }
  const ok = ref.kind === "staged"
    ? e.v === 2 && e.kind === "project-env" && e.orgId === lease.orgId && e.projectId === projectId && e.key === st.key && e.stagingId === ref.stagingId && typeof e.value === "string" && Object.keys(e).length === 7
    : e.v === 1 && e.kind === "project-env" && e.projectId === projectId && e.key === st.key && typeof e.value === "string";
  if (ok) keep(e.value);
  if (ok && FAULT === "ack-leaks-value") return { kind: "installed", value: e.value };
  return ok ? { kind: "installed" } : { kind: "unavailable", reason: "value_envelope_mismatch" };
}

async function onEnv(f) {
  if (f.runnerBootId !== BOOT) return err(f, "runner_boot_mismatch");
  if (!mine(f)) return err(f, "task_assignment_mismatch");
  if (f.kind === "env.replica.v1.begin") {
    if (replica.stream !== f.streamId) { replica.stream = f.streamId; replica.seq = 0; replica.receipts.clear(); }
    replica.attempt = f.attemptId;
    replica.staged = new Map(f.projectIds.map((p) => [p, new Map()]));
    return ack(f, replica.seq, { ok: true, phase: "begun" });
  }
  if (f.kind === "env.replica.v1.page") {
    const k = canon(f);
    if (replica.pageAcks.has(k)) return ws.send(replica.pageAcks.get(k));
    if (f.attemptId !== replica.attempt || f.streamId !== replica.stream) return err(f, "reconciliation_attempt_mismatch");
    const results = [];
    for (const st of f.records) {
      const m = await materialize(f.projectId, st);
      replica.staged.get(f.projectId).set(st.key, st);
      results.push({ state: st, materialization: m });
    }
    return ack(f, replica.seq, { ok: true, phase: "page", projectId: f.projectId, after: f.after, recordVersion: f.recordVersion, results, complete: f.complete });
  }
  if (f.kind === "env.replica.v1.commit") {
    if (f.attemptId !== replica.attempt) return err(f, "reconciliation_attempt_mismatch");
    replica.live = replica.staged; replica.attempt = null;
    return ack(f, f.highWater.sequence, { ok: true, phase: "complete", highWater: f.highWater });
  }
  if (f.kind === "env.replica.v1.apply") {
    if (f.streamId !== replica.stream) return err(f, "stream_mismatch");
    const seq = f.delivery.sequence;
    const fp = canon([f.attemptId, f.delivery, f.projectId, f.recordVersion, f.state]);
    if (seq <= replica.seq) {
      const r = replica.receipts.get(seq);
      if (!r) return err(f, "receipt_missing");
      if (r.fp !== fp) return err(f, "delivery_conflict");
      return ack(f, replica.seq, r.answer);
    }
    if (seq !== replica.seq + 1) return err(f, "delivery_gap");
    const m = await materialize(f.projectId, f.state);
    const answer = { ok: true, phase: "applied", projectId: f.projectId, recordVersion: f.recordVersion, result: { state: f.state, materialization: m } };
    replica.seq = seq;
    replica.receipts.set(seq, { fp, answer });
    return ack(f, replica.seq, answer);
  }
}

async function flushEnv() {
  if (envBusy) return;
  envBusy = true;
  while (envQueue.length && leaseReady) await onEnv(envQueue.shift());
  envBusy = false;
}

// ---- frames in ----
let chain = Promise.resolve();
function onText(text) {
  let f;
  try { f = JSON.parse(text); } catch { return; }
  if (!f || typeof f !== "object" || Array.isArray(f)) return;
  chain = chain.then(async () => {
    try {
      if (typeof f.kind === "string" && f.kind.startsWith("env.replica.v1.") && f.kind !== "env.replica.v1.ack" && PHASE[f.kind]) {
        if (!leaseReady && f.runnerBootId === BOOT) {
          return ack(f, 0, { ok: false, phase: PHASE[f.kind], code: "activation_pending", error: "activation_pending" });
        }
        envQueue.push(f);
        return flushEnv();
      }
      await onLease(f);
    } catch (e) {
      process.stderr.write(`frame ${f.kind}: ${e.name}\n`);
    }
  });
}

process.on("SIGTERM", () => process.exit(0));
ws = wsConnect(env.LEASEGATE_BRIDGE_URL, onText);
ws.onopen = request;
